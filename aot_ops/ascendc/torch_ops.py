"""The Ascend C kernels (kernels/ascendc) as PyTorch operators on CPU, through torch.library.

    import aot_ops.ascendc.torch_ops                 # registers torch.ops.ascendc.*
    z = torch.ops.ascendc.add_custom(x, y)           # eager
    f = torch.compile(lambda x, y: torch.ops.ascendc.add_custom(x, y) * 2)
    torch.library.opcheck(torch.ops.ascendc.add_custom.default, (x, y))

Same kernel sources and the same library as the MindSpore operators (aot_ops.ascendc): the kernel runs on the CPU
emulator when its tiling preconditions hold, ATen runs otherwise (aot_ops.ascendc.runtime.path_count tells which).
Each operator has a fake (meta) implementation for torch.compile and an autograd formula.

    operator                                          kernel path
    ascendc::add_custom(x, y, block_dim=8)            float16, numel a multiple of 256 * block_dim
    ascendc::leaky_relu_custom(x, negative_slope=0.01, block_dim=8)   float16, numel a multiple of 16
    ascendc::softmax_custom(x, block_dim=8)           float32, last dimension a multiple of 8 (softmax over it)
"""
from __future__ import annotations

import ctypes

import torch

from .._clib import last_error, open_library
from .._dtypes import checked_ms_name
from .._bundled import library_path

NAMESPACE = "ascendc"


def _lib():
    return open_library(library_path("ascendc"))


def _call(function: str, tensors: list[torch.Tensor], *scalars) -> None:
    """Calls ascendc_torch_<op>(buffers..., shape, ndim, dtype, scalars...) on contiguous CPU tensors of one shape."""
    shape = tensors[0].shape
    dims = (ctypes.c_int64 * max(len(shape), 1))(*shape)
    status = getattr(_lib(), function)(
        *[ctypes.c_void_p(t.data_ptr()) for t in tensors], dims, ctypes.c_int(len(shape)),
        checked_ms_name(tensors[0].dtype).encode(), *scalars)
    if status != 0:
        raise RuntimeError(last_error(_lib()))


_ENTRY = {"add_custom": "ascendc_torch_add_custom", "leaky_relu_custom": "ascendc_torch_leaky_relu_custom",
          "softmax_custom": "ascendc_torch_softmax_custom"}


def run(op: str, inputs: list[torch.Tensor], out: torch.Tensor, *, block_dim: int = 8,
        negative_slope: float = 0.01) -> None:
    """Runs operator `op` ("add_custom", "leaky_relu_custom", "softmax_custom") on contiguous CPU tensors of one
    shape, writing into the caller's `out` (tests fill it with NaN first, so an unwritten element shows)."""
    tensors = [*inputs, out]
    for t in tensors:
        if t.device.type != "cpu" or not t.is_contiguous() or t.shape != out.shape:
            raise ValueError(f"{op}: inputs and out must be contiguous CPU tensors of one shape")
    scalars = [ctypes.c_double(negative_slope)] if op == "leaky_relu_custom" else []
    _call(_ENTRY[op], tensors, *scalars, ctypes.c_int64(block_dim))


def _check_cpu(*tensors: torch.Tensor) -> None:
    for t in tensors:
        if t.device.type != "cpu":
            raise ValueError(f"the Ascend C emulator runs on CPU tensors, got a tensor on {t.device}")


# ---- add_custom ------------------------------------------------------------------------------------------------

@torch.library.custom_op(f"{NAMESPACE}::add_custom", mutates_args=(), device_types="cpu")
def add_custom(x: torch.Tensor, y: torch.Tensor, block_dim: int = 8) -> torch.Tensor:
    """z = x + y (same shape and dtype, no broadcasting)."""
    _check_shapes(x, y)
    _check_cpu(x, y)
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    run("add_custom", [x, y], out, block_dim=block_dim)
    return out


def _check_shapes(x: torch.Tensor, y: torch.Tensor) -> None:
    torch._check(x.shape == y.shape, lambda: f"add_custom: x {tuple(x.shape)} and y {tuple(y.shape)} differ in shape")
    torch._check(x.dtype == y.dtype, lambda: f"add_custom: x {x.dtype} and y {y.dtype} differ in dtype")


@add_custom.register_fake
def _(x, y, block_dim=8):
    _check_shapes(x, y)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _add_backward(ctx, grad):
    return grad, grad, None


add_custom.register_autograd(_add_backward)


# ---- leaky_relu_custom -----------------------------------------------------------------------------------------

@torch.library.custom_op(f"{NAMESPACE}::leaky_relu_custom", mutates_args=(), device_types="cpu")
def leaky_relu_custom(x: torch.Tensor, negative_slope: float = 0.01, block_dim: int = 8) -> torch.Tensor:
    """y = leaky_relu(x, negative_slope). On the kernel path the slope is rounded to float16, as on the NPU."""
    _check_cpu(x)
    x = x.contiguous()
    out = torch.empty_like(x)
    run("leaky_relu_custom", [x], out, block_dim=block_dim, negative_slope=negative_slope)
    return out


@leaky_relu_custom.register_fake
def _(x, negative_slope=0.01, block_dim=8):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _leaky_setup(ctx, inputs, output):
    x, negative_slope, _ = inputs
    ctx.save_for_backward(x)
    ctx.negative_slope = negative_slope


def _leaky_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return torch.where(x > 0, grad, grad * ctx.negative_slope), None, None


leaky_relu_custom.register_autograd(_leaky_backward, setup_context=_leaky_setup)


# ---- softmax_custom --------------------------------------------------------------------------------------------

@torch.library.custom_op(f"{NAMESPACE}::softmax_custom", mutates_args=(), device_types="cpu")
def softmax_custom(x: torch.Tensor, block_dim: int = 8) -> torch.Tensor:
    """y = softmax(x, dim=-1)."""
    torch._check(x.dim() >= 1, lambda: "softmax_custom: softmax over the last dimension needs rank >= 1")
    _check_cpu(x)
    x = x.contiguous()
    out = torch.empty_like(x)
    run("softmax_custom", [x], out, block_dim=block_dim)
    return out


@softmax_custom.register_fake
def _(x, block_dim=8):
    torch._check(x.dim() >= 1, lambda: "softmax_custom: softmax over the last dimension needs rank >= 1")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(output)


def _softmax_backward(ctx, grad):
    (y,) = ctx.saved_tensors
    return y * (grad - (grad * y).sum(-1, keepdim=True)), None


softmax_custom.register_autograd(_softmax_backward, setup_context=_softmax_setup)
