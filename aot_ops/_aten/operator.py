"""The MindSpore operators for ATen calls: one cached AotOp per (overload, non-tensor arguments).

Forward: the generic AtenOp kernel, outputs inferred by running the overload on torch's meta device.
Backward: the generic AtenOpBackward kernel (torch autograd's vector-Jacobian product), registered as the bprop.
"""
from __future__ import annotations

from typing import Any

import torch

from .._meta import MetaInference
from .._paths import library_path
from .._primitive import AotOp
from .bprops import make_bprop
from .encode import encode
from .schema import BoundCall, check_in_scope, is_tensor_value, out_variant, real_type, same_as_none

_operators: dict[tuple, AotOp] = {}


def _substitute(call: BoundCall, tensors) -> tuple[list[Any], dict[str, Any]]:
    """The call's arguments with its tensors replaced, in input order, by `tensors` (as positional + keyword)."""
    it = iter(tensors)
    args, kwargs = [], {}
    for arg, value in zip(call.schema.arguments, call.values):
        type_name, _ = real_type(arg)
        if type_name == "Tensor" and is_tensor_value(value):
            value = next(it)
        elif value is not None and type_name == "List[Tensor]":
            value = [next(it) for _ in value]
        elif value is not None and type_name == "List[Optional[Tensor]]":
            value = [None if v is None else next(it) for v in value]
        elif type_name == "ScalarType" and value is not None and not isinstance(value, torch.dtype):
            from .. import _dtypes

            value = _dtypes.to_torch(value)
        elif same_as_none(type_name):
            value = None  # a CPU device would make the meta run copy out of its meta tensors
        if arg.kwarg_only:
            kwargs[arg.name] = value
        else:
            args.append(value)
    return args, kwargs


def operator_for(call: BoundCall) -> tuple[AotOp, list[Any]]:
    """(the operator, its tensor inputs in order) for a bound call; the operator is created once per distinct
    overload and non-tensor arguments."""
    check_in_scope(call.overload)
    attrs, inputs, key = encode(call)
    cache_key = (call.qualified_name, key)
    op = _operators.get(cache_key)
    if op is None:
        name = call.qualified_name
        attrs = dict(attrs, aten_op=name, aten_out_op=out_variant(call.overload))
        identity = f"{name}{key!r}"

        def forward_meta(*tensors):
            args, kwargs = _substitute(call, tensors)
            return call.overload(*args, **kwargs)

        n = len(inputs)

        def backward_meta(*tensors):
            return tuple(torch.empty_like(t) for t in tensors[:n])

        backward = AotOp(library_path(), "AtenOpBackward", infer=MetaInference(f"{name} (backward)", backward_meta),
                         attrs=attrs, identity=identity + ".backward")
        op = AotOp(library_path(), "AtenOp", infer=MetaInference(name, forward_meta), attrs=attrs,
                   identity=identity, bprop=make_bprop(backward, n))
        _operators[cache_key] = op
    return op, inputs
