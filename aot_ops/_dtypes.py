"""MindSpore dtypes <-> torch dtypes."""
from __future__ import annotations

import mindspore as ms
import torch

_PAIRS = (
    (ms.float16, torch.float16),
    (ms.float32, torch.float32),
    (ms.float64, torch.float64),
    (ms.bfloat16, torch.bfloat16),
    (ms.int8, torch.int8),
    (ms.int16, torch.int16),
    (ms.int32, torch.int32),
    (ms.int64, torch.int64),
    (ms.uint8, torch.uint8),
    (ms.uint16, torch.uint16),
    (ms.uint32, torch.uint32),
    (ms.uint64, torch.uint64),
    (ms.bool_, torch.bool),
    (ms.complex64, torch.complex64),
    (ms.complex128, torch.complex128),
)
_MS_TO_TORCH = {m: t for m, t in _PAIRS}
_TORCH_TO_MS = {t: m for m, t in _PAIRS}


def element_type(ms_dtype):
    """MindSpore hands Custom's dtype inference a TensorType wrapper; unwrap it to the element type."""
    return ms_dtype.element_type() if hasattr(ms_dtype, "element_type") else ms_dtype


def to_torch(ms_dtype) -> torch.dtype:
    dtype = element_type(ms_dtype)
    try:
        return _MS_TO_TORCH[dtype]
    except KeyError:
        raise TypeError(f"MindSpore dtype {dtype} has no torch equivalent") from None


def to_ms(torch_dtype: torch.dtype):
    try:
        return _TORCH_TO_MS[torch_dtype]
    except KeyError:
        raise TypeError(f"torch dtype {torch_dtype} has no MindSpore equivalent") from None

