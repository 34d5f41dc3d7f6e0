"""Ready MindSpore operators backed by the bundled CPU ATen kernels (kernels/aten/cpu).

Each function returns an `ops.Custom` primitive (an AotOp) with output shape, dtype and gradient filled in; use it
in PyNative code or inside `nn.Cell.construct` in GRAPH_MODE:

    relu = aot_ops.leaky_relu()
    y = relu(x)
    dx = ms.grad(lambda x: relu(x).sum())(x)

Outputs follow torch: broadcasting, type promotion (int32 * float32 -> float32, sum of int32 -> int64), the
operator's dtype support. Backwards are aot kernels themselves, so gradients work in both modes.
"""
from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from ._meta import MetaInference
from ._paths import library_path
from ._primitive import AotOp

_aten = torch.ops.aten
NEGATIVE_SLOPE = 0.01  # the slope compiled into LeakyRelu, torch's default
REDUCED_DIM = -1       # the dimension Softmax and MaxDim work on


def _kernel(symbol: str, torch_fn, bprop=None) -> AotOp:
    # The identity is stable: the kernel's behaviour is fully given by the symbol (see _primitive.IDENTITY_ATTR).
    return AotOp(library_path(), symbol, MetaInference(symbol, torch_fn), bprop=bprop, identity=f"aot_ops.{symbol}")


def _same_as_inputs(*inputs):
    """Inference of a backward kernel whose outputs are gradients of the given inputs (same shape and dtype)."""
    return tuple(torch.empty_like(t) for t in inputs)


@functools.lru_cache(maxsize=None)
def leaky_relu() -> AotOp:
    """y = leaky_relu(x, negative_slope=0.01); float16, bfloat16, float32, float64."""
    grad = _kernel("LeakyReluGrad", lambda dy, x: _aten.leaky_relu_backward(dy, x, NEGATIVE_SLOPE, False))

    def bprop(x, out, dout):
        return (grad(dout, x),)

    return _kernel("LeakyRelu", lambda x: F.leaky_relu(x, NEGATIVE_SLOPE), bprop)


def _binary(symbol: str, torch_fn) -> AotOp:
    grad = _kernel(f"{symbol}Grad", lambda dout, a, b: _same_as_inputs(a, b))

    def bprop(a, b, out, dout):
        return grad(dout, a, b)

    return _kernel(symbol, torch_fn, bprop)


@functools.lru_cache(maxsize=None)
def add() -> AotOp:
    """out = a + b with broadcasting and type promotion; every real, complex and bool dtype."""
    return _binary("Add", torch.add)


@functools.lru_cache(maxsize=None)
def mul() -> AotOp:
    """out = a * b with broadcasting and type promotion; every real, complex and bool dtype."""
    return _binary("Mul", torch.mul)


@functools.lru_cache(maxsize=None)
def sum() -> AotOp:  # noqa: A001 - the name users know from torch
    """out = x.sum() as a 0-dim tensor; integer and bool inputs give int64 as in torch."""
    grad = _kernel("SumGrad", lambda dout, x: torch.empty_like(x))

    def bprop(x, out, dout):
        return (grad(dout, x),)

    return _kernel("Sum", torch.sum, bprop)


@functools.lru_cache(maxsize=None)
def matmul() -> AotOp:
    """out = torch.matmul(a, b): vector, matrix, batched and broadcast operands."""
    grad = _kernel("MatmulGrad", lambda dout, a, b: _same_as_inputs(a, b))

    def bprop(a, b, out, dout):
        return grad(dout, a, b)

    return _kernel("Matmul", torch.matmul, bprop)


@functools.lru_cache(maxsize=None)
def softmax() -> AotOp:
    """y = softmax(x, dim=-1); float16, bfloat16, float32, float64."""
    grad = _kernel("SoftmaxGrad", lambda dy, y: torch.empty_like(y))

    def bprop(x, out, dout):
        return (grad(dout, out),)

    return _kernel("Softmax", lambda x: torch.softmax(x, REDUCED_DIM), bprop)


@functools.lru_cache(maxsize=None)
def max() -> AotOp:  # noqa: A001 - the name users know from torch
    """(values, indices) = torch.max(x, dim=-1); indices are int64."""
    grad = _kernel("MaxDimGrad", lambda dvalues, x, indices: torch.empty_like(x))

    def bprop(x, out, dout):
        return (grad(dout[0], x, out[1]),)

    return _kernel("MaxDim", lambda x: tuple(torch.max(x, REDUCED_DIM)), bprop)
