"""Ready MindSpore operators backed by the bundled CPU ATen kernels (kernels/aten/cpu).

Each function returns an `ops.Custom` primitive (an AotOp; a small Cell for layer_norm) with output shape, dtype
and gradient filled in. Parameters are keyword arguments, as in torch, and travel to the kernel as primitive
attributes; use the result in PyNative code or inside `nn.Cell.construct` in GRAPH_MODE, also with dynamic shapes
(`cell.set_inputs(Tensor(shape=[None, 4], ...))`), since every kernel infers its outputs in C++:

    act = aot_ops.leaky_relu(negative_slope=0.2)
    y = act(x)
    dx = ms.grad(lambda x: act(x).sum())(x)

Output shapes follow torch; dtypes too, with one difference: mixing a 0-dim tensor with a larger one promotes
like torch.promote_types (MindSpore's InferType sees no shapes, so a 0-dim operand cannot get torch's lower
priority). Backward passes are aot kernels themselves, so gradients work in both modes. Calls with the same
parameters share one operator (cached).
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from mindspore import nn

from ._core import bprops as _bprops
from ._core.opdef import Backward, OpDef
from ._build.bundled import library_path
from ._core.primitive import AotOp


def _define(symbol: str, attrs: dict | None = None, backward: Backward | None = None) -> AotOp:
    """A bundled CPU kernel as an operator (forward, and its backward kernel when given)."""
    return OpDef(library_path(), symbol, attrs, backward=backward).build()


def _grad(symbol: str, num_inputs: int) -> Backward:
    """The bundled `<symbol>Grad` kernel, called as grad(dout, *inputs)."""
    return Backward(f"{symbol}Grad", _bprops.cotangent_then_inputs, num_inputs)


# Operators made per argument value are kept, most recently used first, up to this many each: a loop over distinct
# floats (leaky_relu(slope) with a schedule) would otherwise keep every primitive alive. An evicted operator keeps
# working where it is referenced. (functools.lru_cache is safe to call from several threads.)
_CACHED = 256


# Keyword arguments are checked here, before they become attributes, so a wrong one is an error that names the
# operator and the argument (not a pybind11 cast failure or "unhashable type" from the operator cache).
def _int(op: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"aot_ops.{op}: {name} must be an int, got {value!r}")
    if not -2**63 <= int(value) < 2**63:
        raise ValueError(f"aot_ops.{op}: {name}={value} does not fit in int64")
    return int(value)


def _float(op: str, name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"aot_ops.{op}: {name} must be a number, got {value!r}")
    return float(value)


def _bool(op: str, name: str, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"aot_ops.{op}: {name} must be True or False, got {value!r}")
    return bool(value)


def _dims(op: str, name: str, value: int | Sequence[int] | None) -> tuple[int, ...]:
    """torch's `dim` argument (None, an int or a sequence of ints) as the int list the kernels read."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(_int(op, name, d) for d in value)
    return (_int(op, name, value),)


def leaky_relu(negative_slope: float = 0.01) -> AotOp:
    """y = leaky_relu(x, negative_slope); float16, bfloat16, float32, float64."""
    return _leaky_relu(_float("leaky_relu", "negative_slope", negative_slope))


@functools.lru_cache(maxsize=_CACHED)
def _leaky_relu(negative_slope: float) -> AotOp:
    return _define("LeakyRelu", {"negative_slope": negative_slope}, _grad("LeakyRelu", 1))


def _binary(symbol: str) -> AotOp:
    return _define(symbol, None, _grad(symbol, 2))


@functools.lru_cache(maxsize=_CACHED)
def add() -> AotOp:
    """out = a + b with broadcasting and type promotion; every dtype ATen's CPU add supports."""
    return _binary("Add")


@functools.lru_cache(maxsize=_CACHED)
def mul() -> AotOp:
    """out = a * b with broadcasting and type promotion; all 15 dtypes."""
    return _binary("Mul")


def sum(dim: int | Sequence[int] | None = None, keepdim: bool = False) -> AotOp:  # noqa: A001 - torch's name
    """out = x.sum(dim, keepdim); all dimensions when `dim` is None. Integer and bool inputs give int64."""
    return _cached_reduction("SumDims", _dims("sum", "dim", dim), _bool("sum", "keepdim", keepdim))


def mean(dim: int | Sequence[int] | None = None, keepdim: bool = False) -> AotOp:
    """out = x.mean(dim, keepdim); all dimensions when `dim` is None. Floating and complex dtypes."""
    return _cached_reduction("MeanDims", _dims("mean", "dim", dim), _bool("mean", "keepdim", keepdim))


@functools.lru_cache(maxsize=_CACHED)
def _cached_reduction(symbol: str, dims: tuple[int, ...], keepdim: bool) -> AotOp:
    return _define(symbol, {"dim": list(dims), "keepdim": keepdim}, _grad(symbol, 1))


@functools.lru_cache(maxsize=_CACHED)
def matmul() -> AotOp:
    """out = torch.matmul(a, b): vector, matrix, batched and broadcast operands of one dtype."""
    return _define("Matmul", None, _grad("Matmul", 2))


def softmax(dim: int = -1) -> AotOp:
    """y = softmax(x, dim); floating dtypes."""
    return _softmax(_int("softmax", "dim", dim))


@functools.lru_cache(maxsize=_CACHED)
def _softmax(dim: int) -> AotOp:
    return _define("Softmax", {"dim": dim}, Backward("SoftmaxGrad", _bprops.cotangent_then_output))


def max(dim: int = -1, keepdim: bool = False) -> AotOp:  # noqa: A001 - torch's name
    """(values, indices) = torch.max(x, dim, keepdim); indices are int64."""
    return _max(_int("max", "dim", dim), _bool("max", "keepdim", keepdim))


@functools.lru_cache(maxsize=_CACHED)
def _max(dim: int, keepdim: bool) -> AotOp:
    return _define("MaxDim", {"dim": dim, "keepdim": keepdim}, Backward("MaxDimGrad", _max_bprop))


def _max_bprop(grad, _num_inputs):
    def bprop(x, out, dout):
        return (grad(dout[0], x, out[1]),)  # the values' cotangent, scattered to the indices
    return bprop


def gelu(approximate: str = "none") -> AotOp:
    """y = gelu(x, approximate) with approximate "none" (exact, erf) or "tanh"; floating dtypes.

    The value is checked by the kernel when MindSpore initialises it: an invalid one fails the first call with
    the kernel's explanation.
    """
    if not isinstance(approximate, str):
        raise TypeError(f"aot_ops.gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return _gelu(approximate)


@functools.lru_cache(maxsize=_CACHED)
def _gelu(approximate: str) -> AotOp:
    return _define("Gelu", {"approximate": approximate}, _grad("Gelu", 1))


class LayerNorm(nn.Cell):
    """y = layer_norm(x, normalized_shape, weight, bias, eps), called as `op(x, weight, bias)`.

    The kernel returns torch's three outputs (y, mean, rstd); the backward uses the saved statistics, users get y.
    """

    def __init__(self, normalized_shape: Sequence[int], eps: float):
        super().__init__()
        attrs = {"normalized_shape": list(normalized_shape), "eps": float(eps)}
        self.op = _define("LayerNorm", attrs, Backward("LayerNormGrad", _layer_norm_bprop, 3))

    def construct(self, x, weight, bias):
        return self.op(x, weight, bias)[0]


def _layer_norm_bprop(grad, _num_inputs):
    def bprop(x, weight, bias, out, dout):
        return grad(dout[0], x, out[1], out[2], weight, bias)  # with the saved mean and rstd
    return bprop


def layer_norm(normalized_shape: int | Sequence[int], eps: float = 1e-5) -> LayerNorm:
    """layer_norm over the trailing `normalized_shape` dimensions; floating dtypes. Call as op(x, weight, bias)."""
    return _cached_layer_norm(_dims("layer_norm", "normalized_shape", normalized_shape),
                              _float("layer_norm", "eps", eps))


@functools.lru_cache(maxsize=_CACHED)
def _cached_layer_norm(normalized_shape: tuple[int, ...], eps: float) -> LayerNorm:
    return LayerNorm(normalized_shape, eps)


def permute(dims: Sequence[int]) -> AotOp:
    """y = x.permute(dims), contiguous; every dtype. The gradient is the inverse permutation."""
    if dims is None:
        raise TypeError("aot_ops.permute: dims must be a sequence of ints, got None")
    return _permute(_dims("permute", "dims", dims))


_permutes: dict[tuple[int, ...], AotOp] = {}


def _permute(dims: tuple[int, ...]) -> AotOp:
    # Cached by hand: the backward of a permutation is the inverse permutation, whose backward is this one, so the
    # operator is stored before its bprop is resolved.
    op = _permutes.get(dims)
    if op is not None:
        return op
    op = _permutes[dims] = _define("Permute", {"dims": list(dims)})
    rank = len(dims)
    wrapped = [d % rank for d in dims] if rank else []
    if sorted(wrapped) == list(range(rank)) and wrapped != list(range(rank)):
        inverse = [0] * rank
        for position, d in enumerate(wrapped):
            inverse[d] = position
        backward = _permute(tuple(inverse))

        def bprop(x, out, dout):
            return (backward(dout),)
    else:  # the identity, or an invalid permutation the kernel reports

        def bprop(x, out, dout):
            return (dout,)

    op.bprop = bprop
    return op
