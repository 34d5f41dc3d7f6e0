"""Finding ATen operators and binding Python arguments to their schemas (torch's own schema objects)."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .._core.torch_private import OpOverload, OpOverloadPacket, overload_names, qualified_op_name, schema_of
from .argtypes import arg_type, real_type


@dataclass(frozen=True)
class BoundCall:
    """An overload and one value per schema argument (defaults filled in), in schema order."""

    overload: OpOverload
    values: tuple

    @property
    def schema(self):
        return schema_of(self.overload)

    @property
    def qualified_name(self) -> str:
        s = self.schema
        return f"{s.name}.{s.overload_name}" if s.overload_name else s.name


def bind(overload: OpOverload, args: Sequence[Any], kwargs: dict[str, Any],
         wrapped_numbers: bool = True) -> BoundCall:
    """Binds like Python binds a call: positional, then keywords, then defaults; TypeError when it does not fit.
    `wrapped_numbers=False` refuses Python numbers for tensor arguments (overload resolution tries that first)."""
    schema = schema_of(overload)
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
        kind, optional = arg_type(a)
        if real_type(a)[0] == "int" and a.name == "reduction" and isinstance(value, str):
            value = _reduction(value)  # losses take torch.nn.functional's strings too
        if value is None and optional:
            ordered.append(None)
            continue
        if not kind.accepts(value, wrapped_numbers):
            raise TypeError(f"argument '{a.name}' must be {a.real_type}, not {type(value).__name__}")
        ordered.append(value)
    return BoundCall(overload, tuple(ordered))


_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}  # at::Reduction


def _reduction(text: str) -> int:
    try:
        return _REDUCTIONS[text]
    except KeyError:
        raise TypeError(f"argument 'reduction' must be one of {sorted(_REDUCTIONS)}, not '{text}'") from None


def describe_schema(packet: OpOverloadPacket) -> str:
    return "\n".join(f"  {schema_of(getattr(packet, name))}" for name in functional_overloads(packet))


@functools.lru_cache(maxsize=None)
def functional_overloads(packet: OpOverloadPacket) -> tuple[str, ...]:
    """Overload names in torch's resolution order, without in-place and out= variants."""
    order = overload_names(packet)
    names = [n or "default" for n in order]
    return tuple(n for n in names if n in packet.overloads() and not schema_of(getattr(packet, n)).is_mutable)


_NAME = re.compile(r"^(?:([A-Za-z_][A-Za-z0-9_]*)::)?([A-Za-z_][A-Za-z0-9_]*)(?:\.([A-Za-z_][A-Za-z0-9_]*))?$")


def _split_name(name: str) -> tuple[str, str, str | None]:
    """'aten::add.Tensor' -> ('aten', 'add', 'Tensor'); 'add' -> ('aten', 'add', None); a library's operator
    'mylib::gmm' -> ('mylib', 'gmm', None); ValueError naming the text for anything else."""
    match = _NAME.match(name) if isinstance(name, str) else None
    if match is None:
        raise ValueError(f"{name!r} is not an operator name: write 'aten::name' or 'aten::name.overload' "
                         "(e.g. 'aten::add.Tensor'), or 'namespace::name' for an operator a library registered "
                         "with torch.library")
    return match.group(1) or "aten", match.group(2), match.group(3)


def packet_for(name: str, given: str | None = None) -> OpOverloadPacket:
    """`leaky_relu`, `aten::leaky_relu` -> torch.ops.aten.leaky_relu; `mylib::gmm` -> torch.ops.mylib.gmm, an
    operator registered with torch.library (AttributeError with a clear text, quoting `given`: the name as the
    user wrote it)."""
    namespace, short, _ = _split_name(name)
    given = name if given is None else given
    try:
        packet = getattr(getattr(torch.ops, namespace), short)
    except (AttributeError, RuntimeError):
        packet = None
    if not isinstance(packet, OpOverloadPacket):
        origin = "" if given in (short, f"{namespace}::{short}") else f" (read from {given!r})"
        what = "ATen operator" if namespace == "aten" else "operator (none is registered with torch.library)"
        raise AttributeError(f"unknown {what} '{namespace}::{short}'{origin}")
    return packet


def with_open_tensors(overload: OpOverload, fixed: dict[str, Any]) -> dict[str, Any]:
    """`fixed` plus the call-time placeholder (argtypes) of every argument not fixed that takes tensors: what
    aten.op binds, leaving those arguments to be given when the operator is called."""
    args = dict(fixed)
    for a in schema_of(overload).arguments:
        if a.is_out or a.name in args:
            continue
        placeholder = arg_type(a)[0].call_time
        if placeholder is not None:
            args[a.name] = placeholder
    return args


def overload_for(name: str) -> OpOverload | None:
    """`aten::add.Tensor` -> that overload; `aten::add` -> None (to be resolved from the arguments)."""
    namespace, op_name, overload_name = _split_name(name)
    if overload_name is None:
        return None
    packet = packet_for(f"{namespace}::{op_name}", given=name)
    overload = getattr(packet, overload_name, None) if overload_name in packet.overloads() else None
    if not isinstance(overload, OpOverload):
        raise AttributeError(f"{namespace}::{op_name} has no overload '{overload_name}'; its overloads are:\n"
                             f"{describe_schema(packet)}")
    return overload


def resolve(packet: OpOverloadPacket, args: Sequence[Any], kwargs: dict[str, Any]) -> BoundCall:
    """The first overload (in torch's order) the arguments bind to, like torch.ops.aten.<op>(...) picks one; a
    number stands for a tensor only when no overload takes it as a number (max(x, 1) is max.dim, not max.other)."""
    errors = []
    for wrapped_numbers in (False, True):
        errors = []
        for name in functional_overloads(packet):
            try:
                return bind(getattr(packet, name), args, kwargs, wrapped_numbers)
            except TypeError as exc:
                errors.append(f"  {schema_of(getattr(packet, name))}: {exc}")
    raise TypeError(f"{qualified_op_name(packet)}: no overload matches these arguments:\n"
                    + "\n".join(errors))


def check_in_scope(call: BoundCall, attrs: dict, inputs: Sequence[Any] | None = None,
                   factories: bool = False) -> bool:
    """Refuses what the generic ATen entry does not run, judged by the call, not the operator's name: the kernel's
    own policy (asked in C++), then the call's arguments (index with integer indices and scaled_dot_product_attention
    with dropout_p=0 run; a boolean index and dropout_p > 0 do not). `attrs`: the call's encoding (encode.encode);
    `inputs`: its tensors (anything with a dtype; None for a None input), or None before they are known.
    `factories`: accept operators that take no tensor (from_torch computes those with constant arguments once, as
    constants). Returns whether the inputs' dtypes can still refuse the call (ask again with them)."""
    from .._core import dtypes as _dtypes, native_state as _runtime

    def name(t) -> str | None:
        dtype = getattr(t, "dtype", None)
        if dtype is None:
            return None
        return _dtypes.ms_name(dtype if isinstance(dtype, torch.dtype) else _dtypes.to_torch(dtype))

    dtypes = None if inputs is None else [name(t) for t in inputs]
    why, checks_dtypes = _runtime.aten_call_refusal(dict(attrs, aten_op=call.qualified_name), dtypes, factories)
    if why:
        raise ValueError(f"{call.qualified_name} cannot be bridged: {why}")
    return checks_dtypes


@functools.lru_cache(maxsize=None)
def out_variant(overload: OpOverload) -> str:
    """The out= overload computing the same thing into given tensors ("aten::add.out"), or "" if none.

    It must take the functional overload's arguments, in the same order and with the same types, followed only by
    one out tensor per returned tensor."""
    schema = schema_of(overload)
    if any(str(r.type) != "Tensor" for r in schema.returns):
        return ""
    functional = [(a.name, str(a.type)) for a in schema.arguments]
    packet = packet_for(schema.name)
    for name in packet.overloads():
        candidate = schema_of(getattr(packet, name))
        outs = [a for a in candidate.arguments if a.is_out]
        rest = [(a.name, str(a.type)) for a in candidate.arguments if not a.is_out]
        if (outs and rest == functional and len(outs) == len(schema.returns)
                and [a.name for a in candidate.arguments[len(rest):]] == [a.name for a in outs]):
            return f"{candidate.name}.{candidate.overload_name}"
    return ""
