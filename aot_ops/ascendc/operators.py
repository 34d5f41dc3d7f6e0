"""MindSpore operators running the bundled Ascend C kernels (kernels/ascendc) on the CPU emulator, with an ATen
fallback.

    add = aot_ops.ascendc.add_custom()
    z = add(x, y)                                       # float16 + add_custom's tiling: the Ascend C kernel
    dx, dy = ms.grad(lambda x, y: add(x, y).sum(), grad_position=(0, 1))(x, y)

The kernels are declared in bundled.py like a user's own (aot_ops.ascendc.load), so these are the operators of that
declaration: each call runs the kernel where its dtypes and tiling allow it and the ATen fallback otherwise (other
dtypes, sizes the kernel cannot tile), so a result is never partial; `aot_ops.ascendc.runtime.path_count` tells
which path ran. `block_dim` is the number of cores the kernel is launched on. Gradients are the fallback's (ATen).
"""
from __future__ import annotations

import functools

from .._core.primitive import AotOp
from . import _bundled as bundled


@functools.lru_cache(maxsize=None)
def add_custom(block_dim: int = 8) -> AotOp:
    """z = x + y, x and y of one shape (no broadcasting on the kernel path) and one floating dtype. Kernel: float16,
    numel a multiple of 256 * block_dim that fits the Unified Buffer."""
    return bundled.library().operator("add_custom", block_dim)


@functools.lru_cache(maxsize=None)
def leaky_relu_custom(negative_slope: float = 0.01, block_dim: int = 8) -> AotOp:
    """y = leaky_relu(x, negative_slope). Kernel: float16, numel a multiple of 16 (any split over cores, tails
    handled); it multiplies by the slope rounded to float16, as the NPU does."""
    return bundled.library().operator("leaky_relu_custom", block_dim, negative_slope=float(negative_slope))


@functools.lru_cache(maxsize=None)
def softmax_custom(block_dim: int = 8) -> AotOp:
    """y = softmax(x, dim=-1). Kernel: float32, last dimension a multiple of 8 (any number of rows, tails
    handled)."""
    return bundled.library().operator("softmax_custom", block_dim)
