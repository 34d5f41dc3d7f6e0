"""A bound ATen call as the attributes the generic AtenOp kernel reads (kernels/aten/generic/aten_op.cpp).

Tensors become MindSpore inputs (attributes hold their input indices); every other argument becomes an attribute
of the kind MindSpore supports. Floats travel as exact text (AotOp's attribute_value), because MindSpore keeps
float attributes as float32 and ATen's arguments are doubles; sizes known only at run time (aten.size) as size
expressions (sizes.py).
"""
from __future__ import annotations

from typing import Any

from .argtypes import CALL_TIME_LIST, ArgKind, arg_type
from .schema import BoundCall


def encode(call: BoundCall) -> tuple[dict[str, Any], list[Any], tuple]:
    """-> (attributes, tensors in input order, a hashable key of the non-tensor arguments).

    The key is the same for two calls that differ only in their tensors, so they can share one operator. A
    tensor list left for call time (CALL_TIME_LIST) takes no place in the list of tensors: the kernel counts its
    length per call (only the last tensor argument may be such a list)."""
    attrs: dict[str, Any] = {}
    kinds: list[int] = []
    inputs: list[Any] = []
    key: list[Any] = []
    call_time_list = False

    def add_input(tensor) -> int:
        inputs.append(tensor)
        return len(inputs) - 1

    for i, (arg, value) in enumerate(zip(call.schema.arguments, call.values)):
        name = f"aten_arg_{i}"
        if value is None:
            kind, encoded = ArgKind.NONE, None
        elif value is CALL_TIME_LIST:
            kind, encoded = ArgKind.CALL_TIME_TENSOR_LIST, len(inputs)
            call_time_list = True
        else:
            kind, encoded = arg_type(arg)[0].encode(arg, value, add_input)
        if call_time_list and kind in (ArgKind.TENSOR, ArgKind.TENSOR_LIST, ArgKind.OPTIONAL_TENSOR_LIST):
            raise TypeError(f"argument '{arg.name}' comes after the tensor list left for call time: give that "
                            "list when making the operator")
        kinds.append(int(kind))
        if encoded is not None:
            attrs[name] = encoded
        key.append((int(kind), _hashable(encoded)))
    attrs["aten_kinds"] = kinds
    attrs["aten_num_inputs"] = -1 if call_time_list else len(inputs)
    if all(str(r.type) == "Tensor" for r in call.schema.returns):
        attrs["aten_num_outputs"] = len(call.schema.returns)
    elif call_time_list:
        raise TypeError("an operator returning a tensor list cannot take a tensor list at call time")
    return attrs, inputs, tuple(key)


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value
