"""What an MS_EXT_KERNEL entry point exports about itself, read through ctypes.

- `ms_ext_signature_<NAME>()`: "inputs=1;outputs=1;infer=1;dtypes=float16,float32" (ms_ext/signature.h)
- `ms_ext_output_types_<NAME>(n, codes_in, codes_out, capacity)`: the kernel's dtype rule, when it has one

AotOp checks each call against the signature while MindSpore infers the output, so a wrong argument count or an
unsupported dtype is reported in Python with the same words the C++ side uses, before anything is launched, and
it asks the kernel's own dtype rule for the output dtypes.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Sequence

import torch

from ._clib import last_error, open_library

# Same order as kMsDtypeOrder in ms_ext/detail/dtype.h: a dtype's index is its code in ms_ext_output_types_<NAME>.
_MS_NAMES = {
    "float16": torch.float16, "float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
    "uint16": torch.uint16, "uint32": torch.uint32, "uint64": torch.uint64, "bool": torch.bool,
    "complex64": torch.complex64, "complex128": torch.complex128,
}
_TORCH_TO_MS_NAME = {v: k for k, v in _MS_NAMES.items()}
_BY_CODE = list(_MS_NAMES.values())
_CODES = {dtype: code for code, dtype in enumerate(_BY_CODE)}


def ms_name(dtype: torch.dtype) -> str:
    return _TORCH_TO_MS_NAME.get(dtype, str(dtype))


def has_ms_name(dtype: torch.dtype) -> bool:
    """Whether MindSpore has this dtype (one of the 15 dtype strings it sends to aot kernels)."""
    return dtype in _TORCH_TO_MS_NAME


class KernelSignature:
    def __init__(self, symbol: str, text: str, library: ctypes.CDLL | None = None):
        fields = dict(item.split("=", 1) for item in text.split(";"))
        self.symbol = symbol
        self.inputs = int(fields["inputs"])
        self.outputs = int(fields["outputs"])
        self.infer = fields.get("infer") == "1"  # shape and dtype rules: C++ InferShape and the dtype rule
        self.dtypes = tuple(_MS_NAMES[n] for n in fields.get("dtypes", "").split(",") if n)  # empty: any
        self._library = library
        self._output_dtypes: dict[tuple, list[torch.dtype]] = {}  # PyNative asks on every call

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

    def output_dtypes(self, dtypes: Sequence[torch.dtype]) -> list[torch.dtype]:
        """The kernel's own dtype rule (C++), evaluated for these input dtypes."""
        key = tuple(dtypes)
        known = self._output_dtypes.get(key)
        if known is not None:
            return known
        self.check(dtypes)
        rule = getattr(self._library, f"ms_ext_output_types_{self.symbol}")
        codes_in = (ctypes.c_int * max(len(dtypes), 1))(*[_CODES[d] for d in dtypes])
        codes_out = (ctypes.c_int * self.outputs)()
        if rule(len(dtypes), codes_in, codes_out, self.outputs) != 0:
            raise TypeError(last_error(self._library))
        result = self._output_dtypes[key] = [_BY_CODE[c] for c in codes_out]
        return result


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
        rule.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int), ctypes.c_int]
    return KernelSignature(symbol, describe().decode(), lib)
