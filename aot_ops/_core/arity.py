"""How many tensors an operator takes and gives: one value, from which everything that depends on it is derived.

An operator's counts come from one of two places: the kernel's exported signature (MS_EXT_KERNEL) or, for entry
points that export none (the generic ATen entry, a ported network's programs, Ascend C entries), its definition
(`OpDef(arity=...)`). From the Arity alone come the argument-count checks of a call in both modes, the input/output
split the kernel checks at launch (the `ms_ext_io` attribute: MindSpore does not pass it, ms_ext/call.h) and the
name of the reg_info MindSpore registers the kernel's inputs and outputs under.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arity:
    """`inputs`: the tensors a call passes to the kernel (a tuple argument counts each of its tensors); None when
    a call decides it (a tensor list given at call time). `outputs`: None when the operator's inference decides
    it per call. `required`: how many leading inputs a call must give; the trailing optional ones it leaves out
    are passed as None (None: all of them are required)."""

    inputs: int | None = None
    outputs: int | None = None
    required: int | None = None

    def __post_init__(self):
        if self.required is not None and (self.inputs is None or not 0 <= self.required <= self.inputs):
            raise ValueError(f"Arity: required={self.required} needs 0 <= required <= inputs ({self.inputs})")

    @property
    def min_inputs(self) -> int | None:
        return self.inputs if self.required is None else self.required

    @property
    def has_optional_inputs(self) -> bool:
        return self.inputs is not None and self.min_inputs < self.inputs

    def check_call(self, name: str, count: int, *, may_omit_optional: bool) -> None:
        """Raises TypeError naming the operator when a call passes `count` tensors it cannot take. A PyNative call
        may leave out trailing optional inputs; a graph (and a primitive's bprop) always passes all of them."""
        if self.inputs is None:
            return
        low = self.min_inputs if may_omit_optional else self.inputs
        if not low <= count <= self.inputs:
            expected = f"expected {low} input(s)" if low == self.inputs else f"expected {low} to {self.inputs} inputs"
            raise TypeError(f"{name}: {expected}, got {count}")

    def io_attribute(self) -> list[int] | None:
        """The `ms_ext_io` attribute: [inputs] or [inputs, outputs]; None when the inputs are decided per call."""
        if self.inputs is None:
            return None
        return [self.inputs] if self.outputs is None else [self.inputs, self.outputs]

    def registration_name(self, symbol: str) -> str:
        """The reg_info name: MindSpore registers a kernel's inputs and outputs once per (name, function), and one
        entry point (the generic AtenOp) serves operators of every arity, so the name carries the counts."""
        if self.inputs is None or self.outputs is None:
            raise ValueError(f"{symbol}: registering with MindSpore needs both counts, got {self}")
        return f"{symbol}_{self.inputs}_{self.outputs}"
