"""Buffers an evaluation-only fused program updates where they live (aot_ops/_port/programs/buffer_writes.py): written in
place by the write node where that is exact, copied in after the last node where it is not, and assigned by the
cell (as before) where a backward may read them. Each against torch over several calls, in both modes."""
from __future__ import annotations

import re

import mindspore as ms
import pytest
import torch

import aot_ops
from support import MODE_IDS, MODES, to_ms, to_torch


class WrittenThenRead(torch.nn.Module):
    """The buffer's only reader is its write (a cache's index_copy_): written in place."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(3, 4))

    def forward(self, x, position):
        self.cache.index_copy_(0, position, x)
        return self.cache.sum(0) * 2


class WrittenTwice(torch.nn.Module):
    """Two writes, the first one's result read between them (a block of decoding steps writes each layer's cache
    once a step): the chain of writes in place."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(3, 4))

    def forward(self, x, position):
        self.cache.index_copy_(0, position, x)
        first = self.cache.sum(0)
        self.cache.index_copy_(0, (position + 1) % 3, x * 2)
        return first + self.cache.sum(0)


class ReadBeforeAndAfter(torch.nn.Module):
    """The old value is read before the write, the new one after: the read runs first, so the write is in place."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.arange(4.0))

    def forward(self, x):
        before = self.total * 2
        self.total.add_(x)
        return before + self.total


class ReturnsTheBuffer(torch.nn.Module):
    """The value written is also the module's output, which must not be the buffer's memory: computed functionally,
    then copied into the buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.arange(4.0))

    def forward(self, x):
        self.total.add_(x)
        return self.total


CASES = {"in_place": (WrittenThenRead, 1), "written_twice": (WrittenTwice, 2), "read_before": (ReadBeforeAndAfter, 1),
         "copied": (ReturnsTheBuffer, 0)}


def _inputs(name: str, step: int) -> tuple[torch.Tensor, ...]:
    x = torch.arange(4.0) + step
    return (x[None], torch.tensor([step % 3])) if name in ("in_place", "written_twice") else (x,)


def _in_place_nodes(program) -> int:
    return len(re.findall(r"writes_input", program.attrs["program_nodes"]))


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("name", CASES)
def test_an_evaluation_only_program_writes_its_buffers_itself(name, mode):
    module_class, in_place = CASES[name]
    torch_module, ported_module = module_class().eval(), module_class().eval()
    cell = aot_ops.from_torch(ported_module, _inputs(name, 0), fuse=True, evaluation_only=True)
    fused = cell.mode_programs["eval"].fused
    assert fused.inference_writes == list(dict(torch_module.named_buffers()))
    assert fused.inference.num_outputs == 1  # the module's output alone: no buffer comes back for an Assign
    assert _in_place_nodes(fused.inference) == in_place
    assert "self.assign" not in open(cell.source_file).read()
    ms.set_context(mode=mode)
    try:
        for step in range(4):
            inputs = _inputs(name, step)
            expected = torch_module(*inputs)
            got = cell(*(to_ms(t) for t in inputs))
            torch.testing.assert_close(to_torch(got), expected, rtol=0, atol=0)
            for key, buffer in torch_module.named_buffers():
                torch.testing.assert_close(to_torch(getattr(cell, key)), buffer, rtol=0, atol=0)
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_a_differentiable_port_keeps_assigning_its_buffers():
    """Its backward reads the buffers' values from before the call: the program returns the update and the cell
    assigns it after."""
    torch_module, ported_module = ReadBeforeAndAfter().eval(), ReadBeforeAndAfter().eval()
    cell = aot_ops.from_torch(ported_module, _inputs("copied", 0), fuse=True)
    for fused in (p.fused for p in cell.mode_programs.values()):
        assert fused.inference_writes == [] and fused.inference.num_outputs == 2
    assert "self.assign" in open(cell.source_file).read()
    for step in range(3):
        x = _inputs("copied", step)[0]
        torch.testing.assert_close(to_torch(cell(to_ms(x))), torch_module(x), rtol=0, atol=0)
    torch.testing.assert_close(to_torch(cell.total), torch_module.total, rtol=0, atol=0)
