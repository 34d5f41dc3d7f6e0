"""Helpers the tests share: run an operator in a Cell (forward or VJP) and compare with torch."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mindspore as ms
import torch
from mindspore import nn, ops

from aot_ops._core.cells import ListCall, OpCell  # noqa: F401 - re-exported for the tests
from aot_ops._core.convert import to_ms, to_torch  # noqa: F401 - re-exported for the tests

# The quick loop (./run.sh test --quick) sets AOT_OPS_QUICK_TESTS=1: PyNative alone for the tests run in both
# modes, and one dtype of each kind instead of every dtype.
QUICK = os.environ.get("AOT_OPS_QUICK_TESTS") == "1"

MODES = (ms.PYNATIVE_MODE, ms.GRAPH_MODE) if not QUICK else (ms.PYNATIVE_MODE,)
MODE_IDS = tuple({ms.PYNATIVE_MODE: "pynative", ms.GRAPH_MODE: "graph"}[m] for m in MODES)

ALL_DTYPES = (
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
    torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32, torch.uint64,
    torch.bool, torch.complex64, torch.complex128,
) if not QUICK else (torch.bfloat16, torch.float32, torch.int64, torch.uint8, torch.bool, torch.complex64)
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64) if not QUICK else (
    torch.bfloat16, torch.float32)


def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def sample(shape, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random data valid for `dtype` (small integers, both signs where the type has them)."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=gen, dtype=dtype if dtype not in (torch.float16, torch.bfloat16)
                           else torch.float32).to(dtype)
    low = 0 if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64) else -5
    return torch.randint(low, 6, shape, generator=gen, dtype=torch.int64).to(dtype)


class VjpCell(nn.Cell):
    """Vector-Jacobian product of a Cell: gradients of all inputs for a given output cotangent."""

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.grad = ops.GradOperation(get_all=True, sens_param=True)

    def construct(self, *inputs_and_sens):
        return self.grad(self.net)(*inputs_and_sens)


def run_forward(op, inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Runs `op` on torch data through MindSpore (in the current mode) and returns torch tensors."""
    out = OpCell(op)(*[to_ms(t) for t in inputs])
    return tuple(to_torch(o) for o in as_tuple(out))


def run_vjp(op, inputs: list[torch.Tensor], cotangents: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    sens = [to_ms(c) for c in cotangents]
    grads = VjpCell(OpCell(op))(*[to_ms(t) for t in inputs], sens[0] if len(sens) == 1 else tuple(sens))
    return tuple(to_torch(g) for g in as_tuple(grads))


def torch_vjp(fn, inputs: list[torch.Tensor], cotangents: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point() or t.is_complex()) for t in inputs]
    outs = as_tuple(fn(*leaves))
    pairs = [(o, c) for o, c in zip(outs, cotangents) if o.requires_grad]
    diff = [leaf for leaf in leaves if leaf.requires_grad]
    grads = torch.autograd.grad([o for o, _ in pairs], diff, [c for _, c in pairs], allow_unused=True)
    it = iter(grads)
    return tuple(next(it) if leaf.requires_grad else torch.zeros_like(leaf) for leaf in leaves)


def assert_same(actual: torch.Tensor, expected: torch.Tensor):
    """Same shape and dtype, values within torch's default tolerance for that dtype."""
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    if expected.dtype in (torch.uint16, torch.uint32, torch.uint64):  # assert_close cannot compare these
        actual, expected = actual.to(torch.int64), expected.to(torch.int64)
    torch.testing.assert_close(actual, expected, equal_nan=True)


REPO = Path(__file__).resolve().parent.parent
TEST_KERNELS = REPO / "tests" / "kernels"


def build_test_library(source_name: str, out_dir) -> str:
    """Builds tests/kernels/<source_name> with `python -m aot_ops build` and returns the library path."""
    out = Path(out_dir) / ("lib" + source_name.rsplit(".", 1)[0] + ".so")
    proc = subprocess.run([sys.executable, "-m", "aot_ops", "build", str(TEST_KERNELS / source_name), "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return str(out)
