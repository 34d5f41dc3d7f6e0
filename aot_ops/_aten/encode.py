"""A bound ATen call as the attributes the generic AtenOp kernel reads (kernels/aten/generic/aten_op.cpp).

Tensors become MindSpore inputs (attributes hold their input indices); every other argument becomes an attribute
of the kind MindSpore supports. Floats travel as exact text (AotOp's attribute_value), because MindSpore keeps
float attributes as float32 and ATen's arguments are doubles; sizes known only at run time (aten.size) as size
expressions (sizes.py).
"""
from __future__ import annotations

import enum
from typing import Any

import torch

from .._signature import has_ms_name, ms_name
from .schema import CALL_TIME_LIST, BoundCall, real_type, same_as_none
from .sizes import SizeExpr, is_symbolic


class ArgKind(enum.IntEnum):  # the same numbers as ArgKind in aten_op.cpp
    TENSOR = 0
    NONE = 1
    BOOL = 2
    INT = 3
    FLOAT = 4
    STR = 5
    INT_LIST = 6
    FLOAT_LIST = 7
    BOOL_LIST = 8
    SCALAR_INT = 9
    SCALAR_FLOAT = 10
    SCALAR_BOOL = 11
    DTYPE = 12
    TENSOR_LIST = 13
    OPTIONAL_TENSOR_LIST = 14
    WRAPPED_INT = 15      # a Python number given for a Tensor argument
    WRAPPED_FLOAT = 16
    WRAPPED_BOOL = 17
    CALL_TIME_TENSOR_LIST = 18  # value: the input index where the list starts; its length is decided per call
    SYM_INT = 19          # value: a size expression (text)
    SYM_INT_LIST = 20     # value: comma-separated size expressions


def _torch_dtype(value) -> torch.dtype:
    if isinstance(value, torch.dtype):
        return value
    from .. import _dtypes

    return _dtypes.to_torch(value)


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
        type_name, _ = real_type(arg)
        name = f"aten_arg_{i}"
        if value is None or same_as_none(type_name):
            kind, encoded = ArgKind.NONE, None
        elif value is CALL_TIME_LIST:
            kind, encoded = ArgKind.CALL_TIME_TENSOR_LIST, len(inputs)
            call_time_list = True
        elif type_name == "Tensor" and isinstance(value, bool):
            kind, encoded = ArgKind.WRAPPED_BOOL, value
        elif type_name == "Tensor" and isinstance(value, int):
            kind, encoded = ArgKind.WRAPPED_INT, _int64(arg, value)
        elif type_name == "Tensor" and isinstance(value, float):
            kind, encoded = ArgKind.WRAPPED_FLOAT, value
        elif type_name == "Tensor":
            kind, encoded = ArgKind.TENSOR, add_input(value)
        elif type_name == "List[Tensor]":
            kind, encoded = ArgKind.TENSOR_LIST, [add_input(v) for v in value]
        elif type_name == "List[Optional[Tensor]]":
            kind, encoded = ArgKind.OPTIONAL_TENSOR_LIST, [-1 if v is None else add_input(v) for v in value]
        elif type_name in ("int", "SymInt") and isinstance(value, SizeExpr):
            kind, encoded = ArgKind.SYM_INT, value.encode()
        elif type_name in ("int", "SymInt"):
            kind, encoded = ArgKind.INT, _int64(arg, value)
        elif type_name == "float":
            kind, encoded = ArgKind.FLOAT, float(value)
        elif type_name == "bool":
            kind, encoded = ArgKind.BOOL, bool(value)
        elif type_name == "str":
            kind, encoded = ArgKind.STR, value
        elif type_name == "number":
            if isinstance(value, bool):
                kind, encoded = ArgKind.SCALAR_BOOL, value
            elif isinstance(value, int):
                kind, encoded = ArgKind.SCALAR_INT, _int64(arg, value)
            else:
                kind, encoded = ArgKind.SCALAR_FLOAT, float(value)
        elif type_name == "ScalarType":
            dtype = _torch_dtype(value)
            if not has_ms_name(dtype):
                raise TypeError(f"argument '{arg.name}': dtype {dtype} has no MindSpore equivalent")
            kind, encoded = ArgKind.DTYPE, ms_name(dtype)
        elif type_name in ("List[int]", "List[SymInt]"):
            values = [value] if isinstance(value, (int, SizeExpr)) else list(value)
            if is_symbolic(values):
                kind = ArgKind.SYM_INT_LIST
                encoded = ",".join((v if isinstance(v, SizeExpr) else SizeExpr((str(_int64(arg, v)),))).encode()
                                   for v in values)
            else:
                kind, encoded = ArgKind.INT_LIST, [_int64(arg, v) for v in values]
        elif type_name == "List[float]":
            # exact text, as attribute_value writes float lists (also for an empty list, which has no element type)
            kind, encoded = ArgKind.FLOAT_LIST, ",".join(repr(float(v)) for v in value)
        elif type_name == "List[bool]":
            kind, encoded = ArgKind.BOOL_LIST, [int(bool(v)) for v in value]
        else:
            raise TypeError(f"argument '{arg.name}' of type {arg.real_type} can only be None here")
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


_INT64 = (-(2 ** 63), 2 ** 63 - 1)


def _int64(arg, value: int) -> int:
    value = int(value)
    if not _INT64[0] <= value <= _INT64[1]:
        raise TypeError(f"argument '{arg.name}': {value} does not fit in int64")
    return value


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value
