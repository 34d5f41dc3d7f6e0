"""MindSpore operators running Ascend C kernels (kernels/ascendc) on the CPU emulator, with an ATen fallback.

    add = aot_ops.ascendc.add_custom()
    z = add(x, y)                                       # float16 + add_custom's tiling: the Ascend C kernel
    dx, dy = ms.grad(lambda x, y: add(x, y).sum(), grad_position=(0, 1))(x, y)

Each call checks the kernel's tiling preconditions first and runs the ATen operator when they do not hold (other
dtypes, sizes the kernel cannot tile), so a result is never partial; `aot_ops.ascendc.runtime.path_count` tells
which path ran. `block_dim` is the number of cores the kernel is launched on. Gradients are ATen kernels of the
CPU library (the backward passes are not Ascend C kernels).
"""
from __future__ import annotations

import functools

from .. import _bprops
from .._opdef import Backward, OpDef
from .._bundled import library_path
from .._primitive import AotOp


def _define(symbol: str, attrs: dict, **gradient) -> AotOp:
    return OpDef(library_path("ascendc"), symbol, attrs, **gradient).build()


def _cpu_grad(symbol: str, make_bprop, attrs: dict) -> Backward:
    """A backward kernel of the CPU library (the backward passes are ATen kernels, not Ascend C ones)."""
    return Backward(symbol, make_bprop, attrs=attrs, library=library_path())


def _add_bprop(x, y, out, dout):
    return dout, dout


@functools.lru_cache(maxsize=None)
def add_custom(block_dim: int = 8) -> AotOp:
    """z = x + y, x and y of one shape and one floating dtype. Kernel: float16, numel a multiple of 256 * block_dim
    that fits the Unified Buffer."""
    return _define("AddCustom", {"block_dim": int(block_dim)}, bprop=_add_bprop)


@functools.lru_cache(maxsize=None)
def leaky_relu_custom(negative_slope: float = 0.01, block_dim: int = 8) -> AotOp:
    """y = leaky_relu(x, negative_slope). Kernel: float16, numel a multiple of 16 (any split over cores, tails
    handled); it multiplies by the slope rounded to float16, as the NPU does."""
    slope = {"negative_slope": float(negative_slope)}
    return _define("LeakyReluCustom", {**slope, "block_dim": int(block_dim)},
                   backward=_cpu_grad("LeakyReluGrad", _bprops.cotangent_then_inputs, slope))


@functools.lru_cache(maxsize=None)
def softmax_custom(block_dim: int = 8) -> AotOp:
    """y = softmax(x, dim=-1). Kernel: float32, last dimension a multiple of 8 (any number of rows, tails
    handled)."""
    return _define("SoftmaxCustom", {"block_dim": int(block_dim)},
                   backward=_cpu_grad("SoftmaxGrad", _bprops.cotangent_then_output, {"dim": -1}))
