"""A bound ATen call as the attributes the generic AtenOp kernel reads (kernels/aten/generic/aten_op.cpp).

Tensors become MindSpore inputs (attributes hold their input indices); every other argument becomes an attribute
of the kind MindSpore supports. Floats travel as Python reprs in strings, because MindSpore keeps float
attributes as float32 and ATen's arguments are doubles.
"""
from __future__ import annotations

import enum
from typing import Any

import torch

from .._signature import has_ms_name, ms_name
from .schema import BoundCall, real_type, same_as_none


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
    WRAPPED_FLOAT = 16    # value: str repr
    WRAPPED_BOOL = 17


def _torch_dtype(value) -> torch.dtype:
    if isinstance(value, torch.dtype):
        return value
    from .. import _dtypes

    return _dtypes.to_torch(value)


def encode(call: BoundCall) -> tuple[dict[str, Any], list[Any], tuple]:
    """-> (attributes, tensors in input order, a hashable key of the non-tensor arguments).

    The key is the same for two calls that differ only in their tensors, so they can share one operator."""
    attrs: dict[str, Any] = {}
    kinds: list[int] = []
    inputs: list[Any] = []
    key: list[Any] = []

    def add_input(tensor) -> int:
        inputs.append(tensor)
        return len(inputs) - 1

    for i, (arg, value) in enumerate(zip(call.schema.arguments, call.values)):
        type_name, _ = real_type(arg)
        name = f"aten_arg_{i}"
        if value is None or same_as_none(type_name):
            kind, encoded = ArgKind.NONE, None
        elif type_name == "Tensor" and isinstance(value, bool):
            kind, encoded = ArgKind.WRAPPED_BOOL, value
        elif type_name == "Tensor" and isinstance(value, int):
            kind, encoded = ArgKind.WRAPPED_INT, value
        elif type_name == "Tensor" and isinstance(value, float):
            kind, encoded = ArgKind.WRAPPED_FLOAT, repr(value)
        elif type_name == "Tensor":
            kind, encoded = ArgKind.TENSOR, add_input(value)
        elif type_name == "List[Tensor]":
            kind, encoded = ArgKind.TENSOR_LIST, [add_input(v) for v in value]
        elif type_name == "List[Optional[Tensor]]":
            kind, encoded = ArgKind.OPTIONAL_TENSOR_LIST, [-1 if v is None else add_input(v) for v in value]
        elif type_name in ("int", "SymInt"):
            kind, encoded = ArgKind.INT, int(value)
        elif type_name == "float":
            kind, encoded = ArgKind.FLOAT, repr(float(value))
        elif type_name == "bool":
            kind, encoded = ArgKind.BOOL, bool(value)
        elif type_name == "str":
            kind, encoded = ArgKind.STR, value
        elif type_name == "number":
            if isinstance(value, bool):
                kind, encoded = ArgKind.SCALAR_BOOL, value
            elif isinstance(value, int):
                kind, encoded = ArgKind.SCALAR_INT, value
            else:
                kind, encoded = ArgKind.SCALAR_FLOAT, repr(float(value))
        elif type_name == "ScalarType":
            dtype = _torch_dtype(value)
            if not has_ms_name(dtype):
                raise TypeError(f"argument '{arg.name}': dtype {dtype} has no MindSpore equivalent")
            kind, encoded = ArgKind.DTYPE, ms_name(dtype)
        elif type_name in ("List[int]", "List[SymInt]"):
            kind, encoded = ArgKind.INT_LIST, [int(value)] if isinstance(value, int) else [int(v) for v in value]
        elif type_name == "List[float]":
            kind, encoded = ArgKind.FLOAT_LIST, ",".join(repr(float(v)) for v in value)
        elif type_name == "List[bool]":
            kind, encoded = ArgKind.BOOL_LIST, [int(bool(v)) for v in value]
        else:
            raise TypeError(f"argument '{arg.name}' of type {arg.real_type} can only be None here")
        kinds.append(int(kind))
        if encoded is not None:
            attrs[name] = encoded
        key.append((int(kind), _hashable(encoded)))
    attrs["aten_kinds"] = kinds
    attrs["aten_num_inputs"] = len(inputs)
    return attrs, inputs, tuple(key)


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value
