"""The one table of ATen schema argument types: for each type, which Python values it accepts, which of them are
MindSpore tensor inputs, how the others travel to the generic AtenOp kernel as attributes, and how a bound value
is turned back into a torch argument for output inference.

Binding (schema.bind), encoding (encode.encode), output inference (operator._substitute), the tensor inputs of a
call (operator.input_flags), aten.op's call-time placeholders and from_torch's graph reading all ask this table,
so a new schema type is taught to aot_ops in one place. `None` values are handled by the callers (every type is
None when its argument is optional and left out); CALL_TIME_LIST too (a tensor list given at call time).
"""
from __future__ import annotations

import enum
from typing import Any, Callable

import torch

from .._core import dtypes as _dtypes
from .sizes import SizeExpr, evaluate, is_symbolic


class ArgKind(enum.IntEnum):  # the same numbers as ArgKind in kernels/aten/generic/aten_plan.h (tests/test_contracts.py)
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
    WRAPPED_SYM_INT = 21  # value: a size expression given for a Tensor argument (`tensor + x.shape[1]`)


class _Placeholder:
    """A tensor argument supplied when the operator is called (aten.op(...) leaves it open). Compared by identity:
    a pickled one (a port plan kept by plan_cache.py) comes back as the same object."""

    def __init__(self, text: str, name: str):
        self._text, self._name = text, name

    def __repr__(self):
        return self._text

    def __reduce__(self):
        return self._name  # pickle's way to say: the module-level object of that name


CALL_TIME = _Placeholder("aten.INPUT", "CALL_TIME")           # one tensor (None allowed at call time when it is optional)
CALL_TIME_LIST = _Placeholder("<tensor list>", "CALL_TIME_LIST")  # a Tensor[] argument: its tensors, as a list or tuple



def is_tensor_value(value: Any) -> bool:
    import mindspore as ms

    return value is CALL_TIME or isinstance(value, (ms.Tensor, torch.Tensor))


def _is_int(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, SizeExpr)


def _is_dtype(value: Any) -> bool:
    if isinstance(value, torch.dtype):
        return True
    try:
        _dtypes.to_torch(value)
        return True
    except (TypeError, KeyError, AttributeError):
        return False


def _int64(arg, value: int) -> int:
    value = int(value)
    if not -(2 ** 63) <= value <= 2 ** 63 - 1:
        raise TypeError(f"argument '{arg.name}': {value} does not fit in int64")
    return value


class ArgType:
    """One schema type. The defaults describe a non-tensor value that travels unchanged."""

    tensors = False          # whether values of this type hold MindSpore inputs
    call_time = None         # what aten.op leaves open for an argument of this type not fixed by the user

    def accepts(self, value: Any, wrapped_numbers: bool) -> bool:
        return False  # Generator, ...: only None is accepted (checked by the caller)

    def input_flags(self, value: Any, optional: bool) -> list[bool]:
        """One flag per MindSpore input the value supplies: whether None may be given for it."""
        return []

    def encode(self, arg, value: Any, add_input: Callable[[Any], int]) -> tuple[ArgKind, Any]:
        raise TypeError(f"argument '{arg.name}' of type {arg.real_type} can only be None here")

    def to_torch(self, value: Any, next_tensor: Callable[[], Any], shapes) -> Any:
        return value


class _Tensor(ArgType):
    tensors = True
    call_time = CALL_TIME

    def accepts(self, value, wrapped_numbers):
        # A Python number where a tensor is expected is a "wrapped number", as in torch (x * 2.0 records
        # aten::mul.Tensor(x, 2.0)); it promotes like a scalar. A size known at run time is one too.
        return is_tensor_value(value) or (wrapped_numbers and isinstance(value, (bool, int, float, SizeExpr)))

    def input_flags(self, value, optional):
        return [optional] if is_tensor_value(value) else []

    def encode(self, arg, value, add_input):
        if isinstance(value, bool):
            return ArgKind.WRAPPED_BOOL, value
        if isinstance(value, int):
            return ArgKind.WRAPPED_INT, _int64(arg, value)
        if isinstance(value, float):
            return ArgKind.WRAPPED_FLOAT, value
        if isinstance(value, SizeExpr):
            return ArgKind.WRAPPED_SYM_INT, value.encode()
        return ArgKind.TENSOR, add_input(value)

    def to_torch(self, value, next_tensor, shapes):
        if is_tensor_value(value):
            return next_tensor()
        return evaluate(value, shapes) if is_symbolic(value) else value


class _TensorList(ArgType):
    tensors = True
    call_time = CALL_TIME_LIST

    def accepts(self, value, wrapped_numbers):
        return value is CALL_TIME_LIST or (isinstance(value, (list, tuple)) and all(map(is_tensor_value, value)))

    def input_flags(self, value, optional):
        return [False] * len(value)

    def encode(self, arg, value, add_input):
        return ArgKind.TENSOR_LIST, [add_input(v) for v in value]

    def to_torch(self, value, next_tensor, shapes):
        return [next_tensor() for _ in value]


class _OptionalTensorList(ArgType):
    tensors = True

    def accepts(self, value, wrapped_numbers):
        return isinstance(value, (list, tuple)) and all(v is None or is_tensor_value(v) for v in value)

    def input_flags(self, value, optional):
        return [False] * sum(v is not None for v in value)

    def encode(self, arg, value, add_input):
        return ArgKind.OPTIONAL_TENSOR_LIST, [-1 if v is None else add_input(v) for v in value]

    def to_torch(self, value, next_tensor, shapes):
        return [None if v is None else next_tensor() for v in value]


class _Int(ArgType):
    def accepts(self, value, wrapped_numbers):
        return _is_int(value)  # a size expression (aten.size) stands for an int known at run time

    def encode(self, arg, value, add_input):
        if isinstance(value, SizeExpr):
            return ArgKind.SYM_INT, value.encode()
        return ArgKind.INT, _int64(arg, value)

    def to_torch(self, value, next_tensor, shapes):
        return evaluate(value, shapes) if is_symbolic(value) else value


class _IntList(ArgType):
    def accepts(self, value, wrapped_numbers):
        return _is_int(value) or (isinstance(value, (list, tuple)) and all(_is_int(v) for v in value))

    def encode(self, arg, value, add_input):
        values = [value] if isinstance(value, (int, SizeExpr)) else list(value)
        if is_symbolic(values):
            return ArgKind.SYM_INT_LIST, ",".join(
                (v if isinstance(v, SizeExpr) else SizeExpr((str(_int64(arg, v)),))).encode() for v in values)
        return ArgKind.INT_LIST, [_int64(arg, v) for v in values]

    def to_torch(self, value, next_tensor, shapes):
        return evaluate(value, shapes) if is_symbolic(value) else value


class _Float(ArgType):
    def accepts(self, value, wrapped_numbers):
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    def encode(self, arg, value, add_input):
        return ArgKind.FLOAT, float(value)


class _FloatList(ArgType):
    def accepts(self, value, wrapped_numbers):
        return isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value)

    def encode(self, arg, value, add_input):
        # exact text, as attribute_value writes float lists (also for an empty list, which has no element type)
        return ArgKind.FLOAT_LIST, ",".join(repr(float(v)) for v in value)


class _Bool(ArgType):
    def accepts(self, value, wrapped_numbers):
        return isinstance(value, bool)

    def encode(self, arg, value, add_input):
        return ArgKind.BOOL, bool(value)


class _BoolList(ArgType):
    def accepts(self, value, wrapped_numbers):
        return isinstance(value, (list, tuple)) and all(isinstance(v, bool) for v in value)

    def encode(self, arg, value, add_input):
        return ArgKind.BOOL_LIST, [int(bool(v)) for v in value]


class _Number(ArgType):
    def accepts(self, value, wrapped_numbers):
        # a size expression: an int known at run time (a mean over the batch divides by a size)
        return isinstance(value, (bool, int, float, SizeExpr))

    def encode(self, arg, value, add_input):
        if isinstance(value, SizeExpr):
            return ArgKind.SYM_INT, value.encode()  # the kernel pushes the evaluated int, a valid Scalar
        if isinstance(value, bool):
            return ArgKind.SCALAR_BOOL, value
        if isinstance(value, int):
            return ArgKind.SCALAR_INT, _int64(arg, value)
        return ArgKind.SCALAR_FLOAT, float(value)

    def to_torch(self, value, next_tensor, shapes):
        return evaluate(value, shapes) if is_symbolic(value) else value


class _Str(ArgType):
    def accepts(self, value, wrapped_numbers):
        return isinstance(value, str)

    def encode(self, arg, value, add_input):
        return ArgKind.STR, value


class _ScalarType(ArgType):
    def accepts(self, value, wrapped_numbers):
        return _is_dtype(value)

    def encode(self, arg, value, add_input):
        dtype = self.to_torch(value, None, None)
        if not _dtypes.has_ms_name(dtype):
            raise TypeError(f"argument '{arg.name}': dtype {dtype} has no MindSpore equivalent")
        return ArgKind.DTYPE, _dtypes.ms_name(dtype)

    def to_torch(self, value, next_tensor, shapes):
        return value if isinstance(value, torch.dtype) else _dtypes.to_torch(value)


class _SameAsNone(ArgType):
    """Arguments whose only meaningful values here mean the same as None: the kernel runs on CPU, on strided
    tensors, and MindSpore receives every output as a contiguous copy (so a memory format changes no value)."""

    def __init__(self, accepts: Callable[[Any], bool]):
        self._accepts = accepts

    def accepts(self, value, wrapped_numbers):
        return self._accepts(value)

    def encode(self, arg, value, add_input):
        return ArgKind.NONE, None

    def to_torch(self, value, next_tensor, shapes):
        return None  # a CPU device would make the fake run copy out of its fake tensors


class _MemoryFormat(ArgType):
    """A memory format changes no value of a single operator's output (MindSpore receives a contiguous copy), but
    inside a program (from_torch's fuse=True) the next node may view the result, so the format travels: as the int
    of c10::MemoryFormat, which is how the boxed dispatcher carries it."""

    CODES = {torch.contiguous_format: 0, torch.preserve_format: 1, torch.channels_last: 2, torch.channels_last_3d: 3}

    def accepts(self, value, wrapped_numbers):
        # An int is a code: how a schema's default (`memory_format=contiguous_format`) and an attribute carry it
        return isinstance(value, torch.memory_format) or (type(value) is int and value in self.CODES.values())

    def encode(self, arg, value, add_input):
        return ArgKind.INT, value if type(value) is int else self.CODES[value]

    def to_torch(self, value, next_tensor, shapes):
        if type(value) is int:
            return next(f for f, code in self.CODES.items() if code == value)
        return value


_OTHER = ArgType()
ARG_TYPES: dict[str, ArgType] = {
    "Tensor": _Tensor(),
    "List[Tensor]": _TensorList(),
    "List[Optional[Tensor]]": _OptionalTensorList(),
    "int": _Int(),
    "SymInt": _Int(),
    "List[int]": _IntList(),
    "List[SymInt]": _IntList(),
    "float": _Float(),
    "List[float]": _FloatList(),
    "bool": _Bool(),
    "List[bool]": _BoolList(),
    "number": _Number(),
    "str": _Str(),
    "ScalarType": _ScalarType(),
    "Layout": _SameAsNone(lambda v: v == torch.strided),
    "Device": _SameAsNone(lambda v: torch.device(v).type == "cpu" if isinstance(v, (str, torch.device)) else False),
    "MemoryFormat": _MemoryFormat(),
}


def real_type(arg) -> tuple[str, bool]:
    """(type without Optional, is optional), e.g. ("List[int]", True) for `int[]? dim`."""
    text = str(arg.real_type)
    if text.startswith("Optional[") and text.endswith("]"):
        return text[len("Optional["):-1], True
    return text, False


def arg_type(arg) -> tuple[ArgType, bool]:
    """The table's entry for a schema argument, and whether the argument is optional."""
    type_name, optional = real_type(arg)
    return ARG_TYPES.get(type_name, _OTHER), optional
