"""Any ATen operator as a MindSpore operator, forward and backward, with no compiler run.

    from aot_ops import aten
    y = aten.leaky_relu(x, 0.2)                     # PyNative: called like torch.ops.aten
    y = aten.add.Tensor(a, b, alpha=2)              # an explicit overload
    op = aten.op("aten::layer_norm", normalized_shape=[64], eps=1e-5)   # a ready operator for nn.Cell
    ... construct(self, x): return self.op(x, self.weight, self.bias)    # GRAPH_MODE and PyNative

Tensors are MindSpore tensors; every other argument (ints, floats, bools, strings, lists, dtypes, None) is fixed
when the operator is made and travels to the kernel as attributes. Outputs are inferred with torch on the meta
device, so shapes, broadcasting and type promotion are torch's; gradients come from torch autograd, replayed in
the kernel. Operators whose output size depends on data, random operators, in-place and out= overloads are
refused when the operator is made. One precompiled entry point (AtenOp in the bundled library) runs them all.
"""
from __future__ import annotations

import typing as _typing

from ._aten import argtypes as _argtypes
from ._aten import operator as _operator
from ._aten import schema as _schema
from ._aten import sizes as _sizes
from ._core import torch_private as _torch_private

__all__ = ["op", "INPUT", "size", "size_max", "size_min", "SizeExpr"]


def _run(call: _schema.BoundCall):
    operator, tensors = _operator.operator_for(call)
    return operator(*tensors)


class Overload:
    """One overload, e.g. aten.add.Tensor."""

    def __init__(self, overload):
        self._overload = overload

    def __call__(self, *args, **kwargs):
        try:
            call = _schema.bind(self._overload, args, kwargs)
        except TypeError as exc:
            raise TypeError(f"{_torch_private.schema_of(self._overload)}: {exc}") from None
        return _run(call)

    def __repr__(self):
        return f"aten overload {_torch_private.schema_of(self._overload)}"


class OpPacket:
    """All overloads of one operator, e.g. aten.add; calling it picks the overload the arguments fit."""

    def __init__(self, name: str):
        self._packet = _schema.packet_for(name)

    def __call__(self, *args, **kwargs):
        return _run(_schema.resolve(self._packet, args, kwargs))

    def __getattr__(self, overload: str) -> Overload:
        if overload.startswith("_"):
            raise AttributeError(overload)
        return Overload(_schema.overload_for(f"{_torch_private.qualified_op_name(self._packet)}.{overload}"))

    def __repr__(self):
        return f"aten operator with overloads:\n{_schema.describe_schema(self._packet)}"


def op(name: str, /, *, out_shapes=None, out_dtypes=None, shape_inputs: int = 0, recompute: bool = False,
       **fixed: _typing.Any):
    """A ready MindSpore operator (an AotOp) for `name` ("aten::layer_norm" or "aten::add.Tensor") with the
    non-tensor arguments fixed now; call it with the remaining tensor arguments, in schema order.

    - Optional tensor arguments not fixed here may be left out at call time (trailing ones), as in torch:
      `aten.op("aten::layer_norm", normalized_shape=[64])` is called as op(x), op(x, w) or op(x, w, b). Inside a
      GRAPH_MODE Cell, pass None for the ones you leave out, or fix them here (weight=None).
    - A tensor list (aten::cat's `tensors`) not fixed here is given at call time as one list or tuple:
      `aten.op("aten::cat", dim=1)([a, b])`; with its length fixed here, as separate tensors:
      `aten.op("aten::cat", tensors=[aten.INPUT, aten.INPUT], dim=1)(a, b)`.
    - Sizes may depend on input shapes: `aten.op("aten::view", size=[aten.size(0, 0) * 16, 64])`.
    - `out_shapes`/`out_dtypes`: the outputs' shapes (ints or aten.size expressions) and torch dtypes, when you
      know them: MindSpore then infers shapes in C++, which GRAPH_MODE needs for inputs with dynamic shapes
      (`cell.set_inputs(Tensor(shape=[None, ...]))`).
    - `shape_inputs=k` (with `out_shapes`): the last k tensors given at call time only lend their shapes to size
      expressions, numbered after the operator's own tensors: `aten.op("aten::arange", end=aten.size(0, 1),
      out_shapes=[[aten.size(0, 1)]], out_dtypes=[torch.int64], shape_inputs=1)(input_ids)` is
      torch.arange(input_ids.shape[1]) for every sequence length.
    - `recompute=True`: MindSpore's autodiff computes the operator's result again for the backward instead of
      keeping it (Primitive.recompute; activation checkpointing). Applied in GRAPH_MODE; PyNative's autodiff of an
      ms.jit call ignores it (tests/test_checkpointing.py).

    The same (operator, arguments) gives the same cached operator, so a training loop does not rebuild it."""
    overload = _schema.overload_for(name)
    if overload is not None:
        candidates = [overload]
    else:
        packet = _schema.packet_for(name)
        candidates = [getattr(packet, n) for n in _schema.functional_overloads(packet)]
    errors = []
    for candidate in candidates:
        try:
            call = _schema.bind(candidate, (), _schema.with_open_tensors(candidate, fixed))
        except TypeError as exc:
            errors.append(f"  {_torch_private.schema_of(candidate)}: {exc}")
            continue
        operator, _ = _operator.operator_for(call, out_shapes, out_dtypes, shape_inputs, recompute)
        return operator
    raise TypeError(f"{name}: no overload matches these arguments:\n" + "\n".join(errors))


INPUT = _argtypes.CALL_TIME  # a tensor given at call time, in a list argument: tensors=[aten.INPUT, aten.INPUT]
size = _sizes.size
size_max = _sizes.size_max
size_min = _sizes.size_min
SizeExpr = _sizes.SizeExpr


def __getattr__(name: str) -> OpPacket:
    """aten.<name> for every ATen operator."""
    if name.startswith("_"):
        raise AttributeError(name)
    return OpPacket(name)
