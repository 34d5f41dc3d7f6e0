"""The signature an MS_EXT_KERNEL entry point exports (`ms_ext_signature_<NAME>`), read through ctypes.

AotOp checks each call against it while MindSpore infers the output, so a wrong argument count or an unsupported
dtype is reported in Python with the same words the C++ side uses, before anything is launched.
"""
from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch

_MS_NAMES = {
    "float16": torch.float16, "float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16,
    "int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8,
    "uint16": torch.uint16, "uint32": torch.uint32, "uint64": torch.uint64, "bool": torch.bool,
    "complex64": torch.complex64, "complex128": torch.complex128,
}
_TORCH_TO_MS_NAME = {v: k for k, v in _MS_NAMES.items()}


def ms_name(dtype: torch.dtype) -> str:
    return _TORCH_TO_MS_NAME.get(dtype, str(dtype))


@dataclass(frozen=True)
class KernelSignature:
    inputs: int
    outputs: int
    workspaces: int
    dtypes: tuple[torch.dtype, ...]  # empty: any dtype

    @classmethod
    def parse(cls, text: str) -> "KernelSignature":
        fields = dict(item.split("=", 1) for item in text.split(";"))
        names = [n for n in fields.get("dtypes", "").split(",") if n]
        return cls(int(fields["inputs"]), int(fields["outputs"]), int(fields.get("workspaces", 0)),
                   tuple(_MS_NAMES[n] for n in names))

    def check(self, op_name: str, dtypes: Sequence[torch.dtype]) -> None:
        if len(dtypes) != self.inputs:
            raise ValueError(f"{op_name}: expected {self.inputs} input(s), got {len(dtypes)}")
        if not self.dtypes:
            return
        for i, dtype in enumerate(dtypes):
            if dtype not in self.dtypes:
                supported = ", ".join(ms_name(d) for d in self.dtypes)
                raise TypeError(f"{op_name}: input {i} has dtype {ms_name(dtype)}, which this operator does not "
                                f"support (supported: {supported})")


@functools.lru_cache(maxsize=None)
def read_signature(library: str, symbol: str) -> KernelSignature | None:
    """The signature of `symbol`, or None when the entry point was not written with MS_EXT_KERNEL."""
    lib = ctypes.CDLL(str(Path(library).resolve()))
    try:
        describe = getattr(lib, f"ms_ext_signature_{symbol}")
    except AttributeError:
        return None
    describe.restype = ctypes.c_char_p
    describe.argtypes = []
    return KernelSignature.parse(describe().decode())
