"""from_torch_split beyond one graph per piece of code: a graph Dynamo runs for several instances of a submodule's
class, and the code it leaves to torch past the recompile limit, told per thread. (The basic split and its
refusals: tests/test_from_torch.py; torchvision's detectors: tests/test_vision_zoo.py.)"""
from __future__ import annotations

import threading

import torch
from torch import nn

import aot_ops
from support import to_ms, to_torch

WAIT_S = 120


class Head(nn.Module):
    """The rows whose features sum above zero (a data-dependent count), then a linear layer on them."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 3)

    def forward(self, features):
        kept = features[features.sum(1) > 0]
        return self.linear(kept)


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Linear(6, 8)
        self.first, self.second = Head(), Head()

    def forward(self, x):
        features = torch.relu(self.features(x))
        return self.first(features), self.second(features)


def test_two_alike_heads_run_each_with_its_own_weights():
    """Dynamo runs one graph for both heads (it guards on their class, and passes each head's weights to the graph
    as inputs): each head's weights get a cell of their own, held as the cell's Parameters, not taken as inputs,
    and both heads answer as torch's."""
    torch.manual_seed(0)
    model = TwoHeads().eval()
    port = aot_ops.from_torch_split(model)
    for rows in (7, 7):
        x = torch.randn(rows, 6)
        expected = model(x)
        outputs = port(to_ms(x))
        for output, wanted in zip(outputs, expected):
            torch.testing.assert_close(to_torch(output), wanted.detach(), rtol=1e-6, atol=1e-6)
    assert expected[0].shape[0] > 0
    holding = {}
    for part in port.parts:
        if part.cell is None:
            continue
        assert (3, 8) not in part.input_shapes and (8, 6) not in part.input_shapes  # weights are no inputs
        for tensor in part.cell.torch_state_dict().values():
            for name in ("first", "second"):
                if torch.equal(tensor, getattr(model, name).linear.weight):
                    holding.setdefault(name, []).append(part)
    assert len(holding["first"]) == len(holding["second"]) == 1  # one cell each, for the two calls of a size
    assert holding["first"][0] is not holding["second"][0]
    assert holding["first"][0].nodes == holding["second"][0].nodes  # the same graph


class Blocking(nn.Module):
    """Waits, between two graphs, until told to go on: holds its port's call open."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.inside, self.go_on = threading.Event(), threading.Event()

    def forward(self, x):
        y = self.linear(x)
        _wait(self)
        return y * 2


@torch.compiler.disable
def _wait(module):
    module.inside.set()
    assert module.go_on.wait(WAIT_S)


class Sizes(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).relu()


def test_code_past_the_recompile_limit_is_told_to_the_port_whose_thread_ran_it():
    """One thread's split port hits Dynamo's recompile limit (a second size with recompiles=1: torch runs it) while
    another thread's port is inside its call: the code run by torch is named by the first port alone."""
    blocking, sizes = Blocking().eval(), Sizes().eval()
    waiting_port, limited_port = aot_ops.from_torch_split(blocking), aot_ops.from_torch_split(sizes, recompiles=1)
    results = {}

    def call_blocking():
        results["blocking"] = waiting_port(to_ms(torch.ones(2, 4)))

    thread = threading.Thread(target=call_blocking)
    thread.start()
    try:
        assert blocking.inside.wait(WAIT_S)
        for rows in (3, 5):  # the second size is past the limit
            x = torch.randn(rows, 4)
            torch.testing.assert_close(to_torch(limited_port(to_ms(x))), sizes(x).detach(), rtol=1e-6, atol=1e-6)
    finally:
        blocking.go_on.set()
        thread.join()
    torch.testing.assert_close(to_torch(results["blocking"]), blocking(torch.ones(2, 4)).detach(), rtol=1e-6,
                               atol=1e-6)
    assert len(limited_port.in_torch) == 1 and "forward" in limited_port.in_torch[0]
    assert waiting_port.in_torch == []
