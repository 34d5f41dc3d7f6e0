"""Fused programs kept across ports (aot_ops/_port/programs/fused_cache.py): a graph AOTAutograd traced once is not traced
again, whatever the weights; anything that changes the programs (the graph's constants, what is trained, input
gradients) makes a new key; graphs calling operators torch does not define are never kept. Every port trains as
torch does, from the cache or not."""
from __future__ import annotations

import copy
import logging
import os

import pytest
import torch

import aot_ops
import aot_ops._port.programs.fused as fused_module
from port_support import assert_state_close, batches, train_mindspore, train_torch
from torch_nets import RoundThrough

DATA = batches((4, 6), count=3)


class ScaledClassifier(torch.nn.Module):
    """A loss whose graph holds a constant tensor of its own (torch.tensor in forward: a lifted constant)."""

    def __init__(self, scale, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.body = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 5))
        self.scale = scale

    def forward(self, x, target):
        return torch.nn.functional.cross_entropy(self.body(x) * torch.tensor(self.scale), target)


class Traces:
    """Counts AOTAutograd traces (fused.fuse runs) made by ports."""

    def __init__(self, monkeypatch):
        self.count = 0
        trace = fused_module.fuse

        def counted(*args, **kwargs):
            self.count += 1
            return trace(*args, **kwargs)

        monkeypatch.setattr(fused_module, "fuse", counted)


@pytest.fixture
def traces(aot_cache, monkeypatch):
    monkeypatch.delenv("AOT_OPS_PORT_CACHE", raising=False)
    return Traces(monkeypatch)


def _port_and_train(module, **options):
    """Ports `module` (fuse=True, both modes), trains the cell and a copy of the module, and checks they agree."""
    reference = copy.deepcopy(module)
    x, target = DATA[0]
    cell = aot_ops.from_torch(module, (x, target), fuse=True, **options)
    assert train_mindspore(cell, DATA) == pytest.approx(train_torch(reference, DATA), rel=1e-5, abs=1e-6)
    assert_state_close(cell, reference)
    return cell


def _kept(aot_cache) -> int:
    folder = aot_cache / "fused"
    return len(list(folder.glob("*.pkl"))) if folder.is_dir() else 0


def test_a_traced_graph_is_kept_and_reused_for_other_weights(traces, aot_cache):
    _port_and_train(ScaledClassifier([1.0, 2.0, 0.5, 1.0, 3.0], seed=0))
    assert (traces.count, _kept(aot_cache)) == (1, 1)
    _port_and_train(ScaledClassifier([1.0, 2.0, 0.5, 1.0, 3.0], seed=1))  # other weights: the same programs
    assert (traces.count, _kept(aot_cache)) == (1, 1)


@pytest.mark.parametrize("change", ["constant", "trainable", "input_grads"])
def test_what_changes_the_programs_changes_the_key(traces, aot_cache, change):
    _port_and_train(ScaledClassifier([1.0, 2.0, 0.5, 1.0, 3.0]))
    module, options = ScaledClassifier([1.0, 2.0, 0.5, 1.0, 3.0]), {}
    if change == "constant":
        module = ScaledClassifier([2.0, 1.0, 1.0, 0.5, 1.0])  # the same code, another constant value
    elif change == "trainable":
        module.body[0].bias.requires_grad_(False)
    else:
        options = {"input_grads": False}
    _port_and_train(module, **options)
    assert (traces.count, _kept(aot_cache)) == (2, 2)


class ScalarScaled(ScaledClassifier):
    """Constants of no dimension (an integer and a float scalar, as transformers' audio and T5 models hold)."""

    def forward(self, x, target):
        return torch.nn.functional.cross_entropy(self.body(x) * torch.tensor(self.scale[0]), target) * torch.tensor(2)


def test_a_graph_with_zero_dimension_constants_is_kept(traces, aot_cache):
    for seed in (0, 1):
        _port_and_train(ScalarScaled([1.5], seed=seed))
    assert (traces.count, _kept(aot_cache)) == (1, 1)


class RoundedClassifier(ScaledClassifier):
    def forward(self, x, target):
        return torch.nn.functional.cross_entropy(RoundThrough.apply(self.body(x) * 4) / 4, target)


def test_a_graph_with_operators_torch_does_not_define_is_not_kept(traces, aot_cache):
    """A ported autograd.Function is an operator numbered per process: traced every time."""
    for _ in range(2):
        _port_and_train(RoundedClassifier([1.0]))
    assert (traces.count, _kept(aot_cache)) == (2, 0)


def test_the_cache_can_be_turned_off(traces, aot_cache, monkeypatch):
    monkeypatch.setenv("AOT_OPS_PORT_CACHE", "0")
    for _ in range(2):
        _port_and_train(ScaledClassifier([1.0, 2.0, 0.5, 1.0, 3.0]))
    assert (traces.count, _kept(aot_cache)) == (2, 0)


def test_a_truncated_entry_is_traced_again_with_a_warning(traces, aot_cache, caplog):
    _port_and_train(ScaledClassifier([1.0, 2.0, 0.5, 1.0, 3.0]))
    (entry,) = (aot_cache / "fused").glob("*.pkl")
    entry.write_bytes(entry.read_bytes()[:100])
    with caplog.at_level(logging.WARNING, logger="aot_ops._port.programs.kept"):
        _port_and_train(ScaledClassifier([1.0, 2.0, 0.5, 1.0, 3.0]))
    assert traces.count == 2
    assert any("ignoring the kept entry" in r.getMessage() and str(entry) in r.getMessage()
               for r in caplog.records)
    assert os.path.getsize(entry) > 100  # written again, whole


def test_each_kind_keeps_its_most_recently_used_entries(aot_cache, monkeypatch):
    """Beyond the limit, the least recently used entry goes; reading an entry makes it the most recently used."""
    from aot_ops._port.programs import kept

    monkeypatch.setattr(kept, "LIMIT", 2)
    paths = [kept.entry("fused", f"entry{k}") for k in range(3)]
    for k, path in enumerate(paths[:2]):
        kept.write(path, {"value": k})
        os.utime(path, (1000 + k, 1000 + k))  # written in that order
    assert kept.read(paths[0]) == {"value": 0}  # now the most recently used
    kept.write(paths[2], {"value": 2})
    assert sorted(p.name for p in (aot_cache / "fused").glob("*.pkl")) == ["entry0.pkl", "entry2.pkl"]
    assert kept.read(paths[1]) is None
