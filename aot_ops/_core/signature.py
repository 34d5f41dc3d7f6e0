"""What an MS_EXT_KERNEL entry point exports about itself, read through ctypes.

- `ms_ext_signature_<NAME>()`: "inputs=1;outputs=1;infer=1;dtypes=float16,float32;attrs=negative_slope:2"
  (ms_ext/signature.h; attrs only when the kernel declares them, each as name:ms_ext_attr_kind)
- `ms_ext_output_types_<NAME>(n, names_in, names_out, capacity)`: the kernel's dtype rule, when it has one; dtypes
  cross as MindSpore's names (the table in aot_ops/_core/dtypes.py and ms_ext/dtypes.h)

AotOp checks each call against the signature while MindSpore infers the output, so a wrong argument count or an
unsupported dtype is reported in Python with the same words the C++ side uses, before anything is launched, and
it asks the kernel's own dtype rule for the output dtypes. The attributes an operator is made with are checked
against the ones the kernel declares: a misspelt name would otherwise leave the kernel on its default.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Mapping, Sequence

import torch

from .attr_kinds import ATTR_KINDS
from .._native.opener import last_error, open_library
from .dtypes import from_ms_name, ms_name


class KernelSignature:
    def __init__(self, symbol: str, text: str, library: ctypes.CDLL | None = None):
        fields = dict(item.split("=", 1) for item in text.split(";"))
        self.symbol = symbol
        self.inputs = int(fields["inputs"])
        self.outputs = int(fields["outputs"])
        self.infer = fields.get("infer") == "1"  # shape and dtype rules: C++ InferShape and the dtype rule
        self.dtypes = tuple(from_ms_name(n) for n in fields.get("dtypes", "").split(",") if n)  # empty: any
        # name -> ms_ext_attr_kind, or None when the kernel does not declare its attributes (nothing to check)
        self.attrs: dict[str, int] | None = None
        if "attrs" in fields:
            pairs = (item.rsplit(":", 1) for item in fields["attrs"].split(",") if item)
            self.attrs = {name: int(kind) for name, kind in pairs}
        self._library = library

    def check(self, dtypes: Sequence[torch.dtype]) -> None:
        if len(dtypes) != self.inputs:
            raise ValueError(f"{self.symbol}: expected {self.inputs} input(s), got {len(dtypes)}")
        if not self.dtypes:
            return
        for i, dtype in enumerate(dtypes):
            if dtype not in self.dtypes:
                supported = ", ".join(ms_name(d) for d in self.dtypes)
                raise TypeError(f"{self.symbol}: input {i} has dtype {ms_name(dtype)}, which this operator does not "
                                f"support (supported: {supported})")

    def check_attrs(self, attrs: Mapping[str, object] | None) -> None:
        """Refuses attributes the kernel does not declare, or of another kind than declared."""
        if self.attrs is None:
            return
        for name, value in (attrs or {}).items():
            if name not in self.attrs:
                declared = ", ".join(self.attrs) or "none"
                raise TypeError(f"{self.symbol}: unknown attribute {name!r} (the kernel declares: {declared})")
            kind_name, accepts = ATTR_KINDS[self.attrs[name]]
            if not accepts(value):
                raise TypeError(f"{self.symbol}: attribute {name!r} must be a {kind_name}, got {value!r}")

    def output_dtypes(self, dtypes: Sequence[torch.dtype]) -> list[torch.dtype]:
        """The kernel's own dtype rule (C++), evaluated for these input dtypes (uncached: the operator keeps one
        OutputCache, inference.py)."""
        self.check(dtypes)
        rule = getattr(self._library, f"ms_ext_output_types_{self.symbol}")
        names_in = (ctypes.c_char_p * max(len(dtypes), 1))(*[ms_name(d).encode() for d in dtypes])
        names_out = (ctypes.c_char_p * self.outputs)()
        if rule(len(dtypes), names_in, names_out, self.outputs) != 0:
            raise TypeError(last_error(self._library))
        return [from_ms_name(n.decode()) for n in names_out]


@functools.lru_cache(maxsize=None)
def read_signature(library: str, symbol: str) -> KernelSignature | None:
    """The signature of `symbol`, or None when the entry point was not written with MS_EXT_KERNEL."""
    lib = open_library(library)
    describe = getattr(lib, f"ms_ext_signature_{symbol}", None)
    if describe is None:
        return None
    describe.restype = ctypes.c_char_p
    describe.argtypes = []
    rule = getattr(lib, f"ms_ext_output_types_{symbol}", None)
    if rule is not None:
        rule.restype = ctypes.c_int
        rule.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p), ctypes.c_int]
    return KernelSignature(symbol, describe().decode(), lib)
