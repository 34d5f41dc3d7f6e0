"""Activation checkpointing as the module asks for it (torch.utils.checkpoint, reentrant or not): ported per node,
fused and compiled, the backward computes the checkpointed regions again instead of keeping their activations, as
torch's does, and training equals torch's in both modes.

What is recomputed is counted, not timed: each block calls a torch.library operator that counts its calls, whose
result a later operator's backward needs. Checkpointed, torch runs it twice per step (forward, then again in the
backward), and so must the port."""
from __future__ import annotations

import copy

import mindspore as ms
import pytest
import torch
import torch.utils.checkpoint as torch_checkpoint
from torch import nn

import aot_ops
from aot_ops._port.programs.program_inputs import SavedFrom
from support import to_ms, to_torch

CALLS = {"counted_sin": 0}


@torch.library.custom_op("aot_ops_checkpoint_tests::counted_sin", mutates_args=())
def counted_sin(x: torch.Tensor) -> torch.Tensor:
    CALLS["counted_sin"] += 1
    return torch.sin(x)


@counted_sin.register_fake
def _(x):
    return torch.empty_like(x)


def _setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


def _backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * torch.cos(x)


counted_sin.register_autograd(_backward, setup_context=_setup)

BLOCKS = 3


class Block(nn.Module):
    sine = staticmethod(counted_sin)

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        y = self.sine(self.fc(x))
        return x + torch.tanh(y * y)  # the product's backward needs y: the sine is recomputed or kept


class Net(nn.Module):
    """`checkpoint`: None (plain), "reentrant" or "non_reentrant", as transformers and timm call it."""

    def __init__(self, checkpoint):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.checkpoint = checkpoint

    def forward(self, x):
        for block in self.blocks:
            if self.checkpoint is None:
                x = block(x)
            else:
                x = torch_checkpoint.checkpoint(block, x, use_reentrant=self.checkpoint == "reentrant")
        return (x * x).mean()


def _net(checkpoint):
    torch.manual_seed(0)
    return Net(checkpoint)


def _inputs():
    return torch.randn(4, 8, generator=torch.Generator().manual_seed(1), requires_grad=True)


_ports: dict[tuple, tuple] = {}


def port(checkpoint, fuse):
    """One port per (checkpointing, fuse), shared by both modes (a ported cell runs in either)."""
    key = (checkpoint, fuse)
    if key not in _ports:
        model = _net(checkpoint)
        _ports[key] = (model, aot_ops.from_torch(model, (_inputs(),), fuse=fuse))
    return _ports[key]


def torch_step(model):
    """The loss, gradients (input first, then parameters) and calls of the counted operator of one step of torch."""
    model = copy.deepcopy(model)
    x = _inputs()
    CALLS["counted_sin"] = 0
    loss = model(x)
    loss.backward()
    return float(loss), [x.grad, *(p.grad for p in model.parameters())], CALLS["counted_sin"]


def ported_step(cell):
    cell.set_train(True)
    step = ms.value_and_grad(cell, 0, cell.trainable_params())
    CALLS["counted_sin"] = 0
    loss, (input_grad, weight_grads) = step(to_ms(_inputs().detach()))
    float(loss.asnumpy())
    return float(loss.asnumpy()), [to_torch(input_grad), *(to_torch(g) for g in weight_grads)], CALLS["counted_sin"]


@pytest.mark.parametrize("checkpoint", ["non_reentrant", "reentrant"])
def test_a_fused_checkpointed_model_recomputes_in_the_backward_as_torch_does_and_gets_its_gradients(checkpoint,
                                                                                                   mode):
    model, cell = port(checkpoint, True)
    loss, grads, calls = ported_step(cell)
    expected_loss, expected_grads, torch_calls = torch_step(model)
    assert torch_calls == 2 * BLOCKS  # torch's own: each block's sine again in the backward
    assert calls == torch_calls
    assert loss == pytest.approx(expected_loss, rel=1e-6)
    for ours, theirs in zip(grads, expected_grads):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
    # the same model without checkpointing keeps the sines: computed once
    assert ported_step(port(None, True)[1])[2] == BLOCKS


@pytest.mark.parametrize("checkpoint", ["non_reentrant", "reentrant"])
def test_a_checkpointed_model_ported_per_node_recomputes_in_graph_mode(checkpoint):
    """Per node, each operator's backward runs its own forward again from its inputs (AtenOpBackward: torch's
    vector-Jacobian product), so a plain port already calls each sine twice a step; checkpointed, the sine a later
    operator's backward reads is recomputed too (MindSpore's recompute; GRAPH_MODE only: PyNative's autodiff of an
    ms.jit graph does not apply it, docs/porting.md)."""
    previous = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        model, cell = port(checkpoint, False)
        loss, grads, calls = ported_step(cell)
        plain_calls = ported_step(port(None, False)[1])[2]
    finally:
        ms.set_context(mode=previous)
    expected_loss, expected_grads, _ = torch_step(model)
    assert plain_calls == 2 * BLOCKS and calls == plain_calls + BLOCKS
    assert loss == pytest.approx(expected_loss, rel=1e-6)
    for ours, theirs in zip(grads, expected_grads):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


def test_a_fused_checkpointed_port_saves_only_what_enters_each_region():
    """The forward program keeps, of the checkpointed blocks, their inputs alone (the block before's output); the
    plain port keeps each block's inner activations as well."""
    def saved_activations(cell):
        fused = cell.mode_programs["train" if "train" in cell.mode_programs else "both"].fused
        return [s for s in fused.saved if s.source is not SavedFrom.INPUT]

    checkpointed = saved_activations(port("non_reentrant", True)[1])
    plain = saved_activations(port(None, True)[1])
    # each region's input but the first (the module's input, which the bprop takes from its own inputs); even the
    # last block's output, which the loss's backward reads, is recomputed from its region's input
    assert len(checkpointed) == BLOCKS - 1
    assert len(plain) > 2 * BLOCKS


def test_checkpointed_training_equals_torchs_over_steps(mode):
    model, cell = port("non_reentrant", True)
    model = copy.deepcopy(model)
    cell.load_torch_state_dict(model.state_dict())
    torch_optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer = ms.nn.SGD(cell.trainable_params(), learning_rate=0.1)
    step = ms.value_and_grad(cell, None, optimizer.parameters)
    cell.set_train(True)
    for k in range(3):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(10 + k))
        torch_optimizer.zero_grad()
        expected = model(x)
        expected.backward()
        torch_optimizer.step()
        loss, grads = step(to_ms(x))
        optimizer(grads)
        assert float(loss.asnumpy()) == pytest.approx(float(expected), rel=1e-6)
    for key, value in cell.torch_state_dict().items():
        torch.testing.assert_close(value, model.state_dict()[key], rtol=1e-5, atol=1e-6)


def test_checkpoint_layers_recomputes_every_layer_of_a_model_that_does_not_ask(mode):
    key = ("layers", True)
    if key not in _ports:
        model = _net(None)
        _ports[key] = (model, aot_ops.from_torch(model, (_inputs(),), fuse=True, checkpoint="layers"))
    model, cell = _ports[key]
    loss, grads, calls = ported_step(cell)
    expected_loss, expected_grads, torch_calls = torch_step(model)
    assert torch_calls == BLOCKS and calls == 2 * BLOCKS  # each layer's sine again in the backward
    assert loss == pytest.approx(expected_loss, rel=1e-6)
    for ours, theirs in zip(grads, expected_grads):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)


def test_checkpoint_layers_names_what_is_missing_or_wrong():
    flat = nn.Sequential(nn.Linear(4, 4))
    with pytest.raises(ValueError, match=r"checkpoint='every'.*give None"):
        aot_ops.from_torch(flat, (torch.randn(2, 4),), checkpoint="every")

    class NoLayers(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return self.fc(x).sum()

    with pytest.raises(aot_ops.PortError, match=r'checkpoint="layers".*no numbered layers'):
        aot_ops.from_torch(NoLayers(), (torch.randn(2, 4),), checkpoint="layers")


class PlainBlock(Block):
    """Block without the library operator (a Python operator does not compile with AOTInductor)."""

    sine = staticmethod(torch.sin)


@pytest.mark.slow  # AOTInductor compiles the forward and the backward (about 20 s)
def test_a_compiled_checkpointed_port_saves_only_region_inputs_and_gets_torchs_gradients():
    torch.manual_seed(0)
    model = Net("non_reentrant")
    model.blocks = nn.ModuleList(PlainBlock() for _ in range(BLOCKS))
    x = _inputs()
    cell = aot_ops.from_torch(model, (x,), fuse="compile")
    fused = cell.mode_programs["train" if "train" in cell.mode_programs else "both"].fused
    assert len([s for s in fused.saved if s.source is not SavedFrom.INPUT]) == BLOCKS - 1
    input_grad, weight_grads = ms.grad(cell, 0, cell.trainable_params())(to_ms(x.detach()))
    model(x).backward()
    torch.testing.assert_close(to_torch(input_grad), x.grad, rtol=1e-5, atol=1e-7)
    for ours, parameter in zip(weight_grads, model.parameters()):
        torch.testing.assert_close(to_torch(ours), parameter.grad, rtol=1e-5, atol=1e-7)


def test_torchs_own_checkpointing_is_untouched_in_threads_not_exporting_and_after():
    """While another thread exports (its checkpoints marked, not run), torch's checkpoint in this thread still
    recomputes in the backward; afterwards torch.utils.checkpoint holds its own entries again."""
    import threading

    from aot_ops._core.torch_private import checkpoint_entries
    from aot_ops._port.trace.checkpoints import checkpoints_marked

    before = checkpoint_entries()
    entered, leave = threading.Event(), threading.Event()

    def exporting():
        with checkpoints_marked():
            entered.set()
            leave.wait(30)

    other = threading.Thread(target=exporting)
    other.start()
    try:
        assert entered.wait(30)
        assert checkpoint_entries() != before  # installed for the other thread
        for checkpoint in ("non_reentrant", "reentrant"):
            assert torch_step(_net(checkpoint))[2] == 2 * BLOCKS, checkpoint
    finally:
        leave.set()
        other.join()
    assert checkpoint_entries() == before


def test_checkpointing_lost_inside_an_autocast_region_is_said_and_training_still_equals_torchs(caplog):
    """torch.export inlines an autocast region without its nodes' meta: checkpointed calls inside one are not seen.
    The port says so (a warning naming the module and the count of checkpointed calls), and trains as without
    checkpointing."""
    import logging

    class Autocast(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return self.inner(x)

    torch.manual_seed(0)
    model = Autocast(Net("non_reentrant"))
    with caplog.at_level(logging.WARNING, logger="aot_ops._port.trace.export"):
        cell = aot_ops.from_torch(model, (_inputs(),), fuse=True)
    lost = [r for r in caplog.records if r.name == "aot_ops._port.trace.export" and r.levelno == logging.WARNING]
    assert lost and lost[0].args == ("Autocast", BLOCKS)
    loss, grads, _calls = ported_step(cell)
    expected_loss, expected_grads, _ = torch_step(model)
    assert loss == pytest.approx(expected_loss, rel=1e-6)
    for ours, theirs in zip(grads, expected_grads):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-7)
