"""MindSpore operators running Ascend C kernels (kernels/ascendc) on the CPU emulator, with an ATen fallback.

    add = aot_ops.ascendc.add_custom()
    z = add(x, y)                                       # float16 + add_custom's tiling: the Ascend C kernel
    dx, dy = ms.grad(lambda x, y: add(x, y).sum(), grad_position=(0, 1))(x, y)

Each call checks the kernel's tiling preconditions first and runs the ATen operator when they do not hold (other
dtypes, sizes the kernel cannot tile), so a result is never partial; `aot_ops.ascendc_runtime.path_count` tells
which path ran. `block_dim` is the number of cores the kernel is launched on. Gradients are ATen kernels of the
CPU library (the backward passes are not Ascend C kernels).
"""
from __future__ import annotations

import functools

from . import operators
from ._primitive import AotOp, stable_identity
from .ascendc_runtime import library_path


def _kernel(symbol: str, attrs: dict, bprop) -> AotOp:
    library = library_path()
    return AotOp(library, symbol, attrs=attrs, bprop=bprop, identity=stable_identity(library, symbol, attrs))


@functools.lru_cache(maxsize=None)
def add_custom(block_dim: int = 8) -> AotOp:
    """z = x + y, x and y of one shape and one floating dtype. Kernel: float16, numel a multiple of 256 * block_dim
    that fits the Unified Buffer."""

    def bprop(x, y, out, dout):
        return dout, dout

    return _kernel("AddCustom", {"block_dim": int(block_dim)}, bprop)


@functools.lru_cache(maxsize=None)
def leaky_relu_custom(negative_slope: float = 0.01, block_dim: int = 8) -> AotOp:
    """y = leaky_relu(x, negative_slope). Kernel: float16, numel a multiple of 16 (any split over cores, tails
    handled); it multiplies by the slope rounded to float16, as the NPU does."""
    grad = operators._kernel("LeakyReluGrad", {"negative_slope": float(negative_slope)})

    def bprop(x, out, dout):
        return (grad(dout, x),)

    return _kernel("LeakyReluCustom", {"negative_slope": float(negative_slope), "block_dim": int(block_dim)}, bprop)


@functools.lru_cache(maxsize=None)
def softmax_custom(block_dim: int = 8) -> AotOp:
    """y = softmax(x, dim=-1). Kernel: float32, last dimension a multiple of 8 (any number of rows, tails
    handled)."""
    grad = operators._kernel("SoftmaxGrad", {"dim": -1})

    def bprop(x, out, dout):
        return (grad(dout, out),)

    return _kernel("SoftmaxCustom", {"block_dim": int(block_dim)}, bprop)
