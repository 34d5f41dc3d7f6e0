"""The declaration of a user's Ascend C kernel: everything the three targets (MindSpore, torch, the NPU build) are
generated from. See aot_ops.ascendc.load."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

_SCALARS = ("int32", "uint32", "int64", "uint64", "float32", "float64")


def fallback_overload(qualified: str):
    """torch.ops.aten.mul.Tensor for "aten::mul.Tensor", the default overload for "aten::leaky_relu" (the names
    aten.op reads, with its errors)."""
    from .._aten.schema import overload_for, packet_for

    return overload_for(qualified) or packet_for(qualified).default


def fallback_argument_names(qualified: str) -> set[str]:
    """The names of the fallback's arguments: an attribute of the same name, or a fallback_args entry, binds one."""
    from .._core.torch_private import schema_of

    return {a.name for a in schema_of(fallback_overload(qualified)).arguments}


def attr_kind(default) -> tuple[str, str]:
    """(C++ type for ms_ext::Attrs, torch schema type) of an attribute, from its default."""
    if isinstance(default, bool):
        return "bool", "bool"
    return ("int64_t", "int") if isinstance(default, int) else ("double", "float")


@dataclass(frozen=True)
class Kernel:
    """One kernel `extern "C" __global__ __aicore__ void <name>(GM_ADDR <inputs>..., GM_ADDR <outputs>...,
    <scalars>...)`.

    - `inputs`, `outputs`: the names of its GM_ADDR parameters, in order (inputs first).
    - `dtypes`: the dtypes it runs; every input and output must have one of them, else the fallback runs.
    - `scalars`: its parameters after the GM_ADDR ones, in order, name -> "int32" | "uint32" | "int64" | "uint64";
      the tiling function returns their values.
    - `tiling(*shapes, block_dim, ub_bytes) -> dict`: see aot_ops.ascendc._tiling (require() refuses a shape).
    - `fallback`: the ATen operator with the same meaning ("aten::mul.Tensor"), its tensor arguments being the
      kernel's inputs in order. It runs where the kernel cannot, and gives the operator's output shapes, dtypes
      (on fake tensors) and gradients.
    - `output_like`: output name -> the input whose shape and dtype it has. Given, the shapes are inferred in C++
      (GRAPH_MODE with a dynamic batch works); omitted, from the fallback in Python (static shapes).
    - `attrs`: the operator's attributes, name -> default (int, float or bool): `lib.<kernel>(negative_slope=0.2)`.
      The tiling function receives them by name (ints and bools as sizes; a float only passes through to a
      "float32"/"float64" scalar), and the fallback's argument of the same name takes the attribute's value.
    - `fallback_args`: constant values of other non-tensor arguments of the fallback ({"dim": -1} for
      "aten::softmax.int"); the rest take their defaults.
    """
    inputs: Sequence[str]
    outputs: Sequence[str]
    dtypes: Sequence[str]
    tiling: Callable
    fallback: str
    scalars: Mapping[str, str] = field(default_factory=dict)
    output_like: Mapping[str, str] | None = None
    attrs: Mapping[str, int | float | bool] = field(default_factory=dict)
    fallback_args: Mapping[str, int | float | bool | Sequence[int]] = field(default_factory=dict)

    def checked(self, name: str) -> "Kernel":
        """Itself after checking the declaration (errors name the kernel and the field)."""
        if not name.isidentifier():
            raise ValueError(f"kernel name {name!r} is not a C identifier")
        for what, names in (("inputs", self.inputs), ("outputs", self.outputs), ("scalars", list(self.scalars))):
            for n in names:
                if not isinstance(n, str) or not n.isidentifier():
                    raise ValueError(f"{name}: {what} entry {n!r} is not an identifier")
        if not self.inputs or not self.outputs:
            raise ValueError(f"{name}: a kernel needs at least one input and one output")
        from .._core.dtypes import NAMES  # the one dtype table (MindSpore's names, also ms_ext's)

        for d in self.dtypes:
            if d not in NAMES:
                raise ValueError(f"{name}: dtype {d!r} is not one of {', '.join(NAMES)}")
        for s, t in self.scalars.items():
            if t not in _SCALARS:
                raise ValueError(f"{name}: scalar {s!r} has type {t!r}, not one of {', '.join(_SCALARS)}")
        for a, default in self.attrs.items():
            if not isinstance(a, str) or not a.isidentifier() or a == "block_dim":
                raise ValueError(f"{name}: attribute name {a!r} is not an identifier other than block_dim")
            if not isinstance(default, (int, float, bool)):
                raise ValueError(f"{name}: attribute {a!r} has default {default!r}: int, float or bool only")
        for a, value in self.fallback_args.items():
            if a in self.attrs:
                raise ValueError(f"{name}: fallback argument {a!r} is also an attribute (which already binds it)")
            ok = isinstance(value, (int, float, bool)) or (
                isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value))
            if not ok:
                raise ValueError(f"{name}: fallback argument {a!r} = {value!r}: int, float, bool or a list of ints")
        if not callable(self.tiling):
            raise TypeError(f"{name}: tiling must be a function (*shapes, block_dim, ub_bytes) -> dict")
        if not isinstance(self.fallback, str) or not self.fallback.startswith("aten::"):
            raise ValueError(f"{name}: fallback must name an ATen operator, e.g. 'aten::mul.Tensor'")
        if self.output_like is not None:
            if sorted(self.output_like) != sorted(self.outputs):
                raise ValueError(f"{name}: output_like must name every output ({list(self.outputs)})")
            for o, i in self.output_like.items():
                if i not in self.inputs:
                    raise ValueError(f"{name}: output_like[{o!r}] = {i!r} is not an input")
        return self
