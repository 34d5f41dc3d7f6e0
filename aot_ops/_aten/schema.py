"""Finding ATen operators and binding Python arguments to their schemas (torch's own schema objects)."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .sizes import SizeExpr

class _Placeholder:
    """A tensor argument supplied when the operator is called (aten.op(...) leaves it open)."""

    def __init__(self, text: str):
        self._text = text

    def __repr__(self):
        return self._text


CALL_TIME = _Placeholder("aten.INPUT")              # one tensor (None allowed at call time when it is optional)
CALL_TIME_LIST = _Placeholder("<tensor list>")    # a Tensor[] argument: its tensors, as one list or tuple


def real_type(arg) -> tuple[str, bool]:
    """(type without Optional, is optional), e.g. ("List[int]", True) for `int[]? dim`."""
    text = str(arg.real_type)
    if text.startswith("Optional[") and text.endswith("]"):
        return text[len("Optional["):-1], True
    return text, False


def is_tensor_value(value: Any) -> bool:
    import mindspore as ms

    return value is CALL_TIME or isinstance(value, (ms.Tensor, torch.Tensor))


def _is_int(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, SizeExpr)


def _accepts(type_name: str, value: Any, wrapped_numbers: bool = True) -> bool:
    """Whether `value` can be passed for an argument of this (non-optional) schema type."""
    if type_name == "Tensor":
        # A Python number where a tensor is expected is a "wrapped number", as in torch (x * 2.0 records
        # aten::mul.Tensor(x, 2.0)); it promotes like a scalar.
        return is_tensor_value(value) or (wrapped_numbers and isinstance(value, (bool, int, float)))
    if type_name == "List[Tensor]":
        return value is CALL_TIME_LIST or (isinstance(value, (list, tuple)) and all(is_tensor_value(v) for v in value))
    if type_name == "List[Optional[Tensor]]":
        return isinstance(value, (list, tuple)) and all(v is None or is_tensor_value(v) for v in value)
    if type_name in ("int", "SymInt"):
        return _is_int(value)  # a size expression (aten.size) stands for an int known at run time
    if type_name == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if type_name == "bool":
        return isinstance(value, bool)
    if type_name == "number":
        return isinstance(value, (bool, int, float))
    if type_name == "str":
        return isinstance(value, str)
    if type_name == "ScalarType":
        return _is_dtype(value)
    if type_name in ("List[int]", "List[SymInt]"):
        return _is_int(value) or (isinstance(value, (list, tuple)) and all(_is_int(v) for v in value))
    if type_name == "List[float]":
        return isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value)
    if type_name == "List[bool]":
        return isinstance(value, (list, tuple)) and all(isinstance(v, bool) for v in value)
    if type_name in _SAME_AS_NONE:
        return _SAME_AS_NONE[type_name](value)
    return False  # Generator, ...: only None is accepted (checked by the caller)


# Arguments whose only meaningful values here mean the same as None: the kernel runs on CPU, on strided tensors,
# and MindSpore receives every output as a contiguous copy (so a memory format changes no value).
_SAME_AS_NONE = {
    "Layout": lambda v: v == torch.strided,
    "Device": lambda v: torch.device(v).type == "cpu" if isinstance(v, (str, torch.device)) else False,
    "MemoryFormat": lambda v: isinstance(v, torch.memory_format),
}


def same_as_none(type_name: str) -> bool:
    return type_name in _SAME_AS_NONE


def _is_dtype(value: Any) -> bool:
    if isinstance(value, torch.dtype):
        return True
    try:
        from .. import _dtypes

        _dtypes.to_torch(value)
        return True
    except (TypeError, KeyError, AttributeError):
        return False


@dataclass(frozen=True)
class BoundCall:
    """An overload and one value per schema argument (defaults filled in), in schema order."""

    overload: torch._ops.OpOverload
    values: tuple

    @property
    def schema(self):
        return self.overload._schema

    @property
    def qualified_name(self) -> str:
        s = self.schema
        return f"{s.name}.{s.overload_name}" if s.overload_name else s.name


def bind(overload: torch._ops.OpOverload, args: Sequence[Any], kwargs: dict[str, Any],
         wrapped_numbers: bool = True) -> BoundCall:
    """Binds like Python binds a call: positional, then keywords, then defaults; TypeError when it does not fit.
    `wrapped_numbers=False` refuses Python numbers for tensor arguments (overload resolution tries that first)."""
    schema = overload._schema
    params = [a for a in schema.arguments if not a.is_out]
    positional = [a for a in params if not a.kwarg_only]
    if len(args) > len(positional):
        raise TypeError(f"takes {len(positional)} positional argument(s) but {len(args)} were given")
    values: dict[str, Any] = {a.name: v for a, v in zip(positional, args)}
    names = {a.name for a in params}
    for key, value in kwargs.items():
        if key not in names:
            raise TypeError(f"got an unexpected keyword argument '{key}'")
        if key in values:
            raise TypeError(f"got multiple values for argument '{key}'")
        values[key] = value
    ordered = []
    for a in params:
        if a.name in values:
            value = values[a.name]
        elif a.has_default_value():
            value = a.default_value
        else:
            raise TypeError(f"missing required argument '{a.name}'")
        type_name, optional = real_type(a)
        if type_name == "int" and a.name == "reduction" and isinstance(value, str):
            value = _reduction(value)  # losses take torch.nn.functional's strings too
        if value is None and optional:
            ordered.append(None)
            continue
        if not _accepts(type_name, value, wrapped_numbers):
            raise TypeError(f"argument '{a.name}' must be {a.real_type}, not {type(value).__name__}")
        ordered.append(value)
    return BoundCall(overload, tuple(ordered))


_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}  # at::Reduction


def _reduction(text: str) -> int:
    try:
        return _REDUCTIONS[text]
    except KeyError:
        raise TypeError(f"argument 'reduction' must be one of {sorted(_REDUCTIONS)}, not '{text}'") from None


def describe_schema(packet: torch._ops.OpOverloadPacket) -> str:
    return "\n".join(f"  {getattr(packet, name)._schema}" for name in functional_overloads(packet))


@functools.lru_cache(maxsize=None)
def functional_overloads(packet: torch._ops.OpOverloadPacket) -> tuple[str, ...]:
    """Overload names in torch's resolution order, without in-place and out= variants."""
    order = [s.overload_name for s in torch._C._jit_get_schemas_for_operator(packet._qualified_op_name)]
    names = [n or "default" for n in order]
    return tuple(n for n in names if n in packet.overloads() and not getattr(packet, n)._schema.is_mutable)


_NAME = re.compile(r"^(?:aten::)?([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?$")


def _split_name(name: str) -> tuple[str, str | None]:
    """'aten::add.Tensor' -> ('add', 'Tensor'); ValueError naming the text for anything else."""
    match = _NAME.match(name) if isinstance(name, str) else None
    if match is None:
        raise ValueError(f"{name!r} is not an ATen operator name: write 'aten::name' or 'aten::name.overload' "
                         "(e.g. 'aten::add.Tensor')")
    return match.group(1), match.group(2)


def packet_for(name: str, given: str | None = None) -> torch._ops.OpOverloadPacket:
    """`leaky_relu`, `aten::leaky_relu` -> torch.ops.aten.leaky_relu (AttributeError with a clear text, quoting
    `given`: the name as the user wrote it)."""
    short, _ = _split_name(name)
    given = name if given is None else given
    try:
        packet = getattr(torch.ops.aten, short)
    except (AttributeError, RuntimeError):
        packet = None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        origin = "" if given in (short, f"aten::{short}") else f" (read from {given!r})"
        raise AttributeError(f"unknown ATen operator 'aten::{short}'{origin}")
    return packet


def overload_for(name: str) -> torch._ops.OpOverload | None:
    """`aten::add.Tensor` -> that overload; `aten::add` -> None (to be resolved from the arguments)."""
    op_name, overload_name = _split_name(name)
    if overload_name is None:
        return None
    packet = packet_for(op_name, given=name)
    overload = getattr(packet, overload_name, None) if overload_name in packet.overloads() else None
    if not isinstance(overload, torch._ops.OpOverload):
        raise AttributeError(f"aten::{op_name} has no overload '{overload_name}'; its overloads are:\n"
                             f"{describe_schema(packet)}")
    return overload


def resolve(packet: torch._ops.OpOverloadPacket, args: Sequence[Any], kwargs: dict[str, Any]) -> BoundCall:
    """The first overload (in torch's order) the arguments bind to, like torch.ops.aten.<op>(...) picks one; a
    number stands for a tensor only when no overload takes it as a number (max(x, 1) is max.dim, not max.other)."""
    errors = []
    for wrapped_numbers in (False, True):
        errors = []
        for name in functional_overloads(packet):
            try:
                return bind(getattr(packet, name), args, kwargs, wrapped_numbers)
            except TypeError as exc:
                errors.append(f"  {getattr(packet, name)._schema}: {exc}")
    raise TypeError(f"aten::{packet._qualified_op_name.split('::')[-1]}: no overload matches these arguments:\n"
                    + "\n".join(errors))


def check_in_scope(overload: torch._ops.OpOverload, factories: bool = False) -> None:
    """Refuses, when the operator is created, what the generic ATen entry does not run (its own policy, asked in
    C++). `factories`: accept operators that take no tensor (from_torch computes those with constant arguments
    once, as constants)."""
    from .. import _runtime

    schema = overload._schema
    name = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
    why = _runtime.aten_refusal(name, factories)
    if why:
        raise ValueError(f"{name} cannot be bridged: {why}")


@functools.lru_cache(maxsize=None)
def out_variant(overload: torch._ops.OpOverload) -> str:
    """The out= overload computing the same thing into given tensors ("aten::add.out"), or "" if none.

    It must take the functional overload's arguments, in the same order and with the same types, followed only by
    one out tensor per returned tensor."""
    schema = overload._schema
    if any(str(r.type) != "Tensor" for r in schema.returns):
        return ""
    functional = [(a.name, str(a.type)) for a in schema.arguments]
    packet = packet_for(schema.name)
    for name in packet.overloads():
        candidate = getattr(packet, name)._schema
        outs = [a for a in candidate.arguments if a.is_out]
        rest = [(a.name, str(a.type)) for a in candidate.arguments if not a.is_out]
        if (outs and rest == functional and len(outs) == len(schema.returns)
                and [a.name for a in candidate.arguments[len(rest):]] == [a.name for a in outs]):
            return f"{candidate.name}.{candidate.overload_name}"
    return ""
