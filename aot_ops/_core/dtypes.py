"""The one dtype table of aot_ops: MindSpore's dtype names <-> torch dtypes <-> MindSpore dtypes.

The names are the strings MindSpore 2.10 sends to an aot kernel ("float16", ..., "complex128"), and they are also
how dtypes cross every C interface of ms_ext (a kernel's dtype rule, the harness, the Ascend C torch entries): the
C++ side reads them with the table in ms_ext/dtypes.h, so no numeric code has to be kept in the same order on both
sides. MindSpore itself is imported only when a MindSpore dtype is asked for, so the harness and the build commands
work without it.
"""
from __future__ import annotations

import functools

import torch

# (MindSpore's name, torch dtype): the 15 dtypes a MindSpore tensor can have.
_TABLE = (
    ("float16", torch.float16),
    ("float32", torch.float32),
    ("float64", torch.float64),
    ("bfloat16", torch.bfloat16),
    ("int8", torch.int8),
    ("int16", torch.int16),
    ("int32", torch.int32),
    ("int64", torch.int64),
    ("uint8", torch.uint8),
    ("uint16", torch.uint16),
    ("uint32", torch.uint32),
    ("uint64", torch.uint64),
    ("bool", torch.bool),
    ("complex64", torch.complex64),
    ("complex128", torch.complex128),
)
NAMES = tuple(name for name, _ in _TABLE)
_BY_NAME = dict(_TABLE)
_NAME_OF = {dtype: name for name, dtype in _TABLE}


def has_ms_name(dtype: torch.dtype) -> bool:
    """Whether MindSpore has this torch dtype."""
    return dtype in _NAME_OF


def ms_name(dtype: torch.dtype) -> str:
    """MindSpore's name of a torch dtype (torch's own text for one MindSpore lacks, for messages)."""
    return _NAME_OF.get(dtype, str(dtype))


def checked_ms_name(dtype: torch.dtype) -> str:
    """MindSpore's name of a torch dtype; TypeError for one MindSpore lacks (complex32, float8, quantized)."""
    try:
        return _NAME_OF[dtype]
    except KeyError:
        raise TypeError(f"torch dtype {dtype} has no MindSpore equivalent") from None


def from_ms_name(name: str) -> torch.dtype:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise TypeError(f"{name!r} is not a MindSpore dtype name ({', '.join(NAMES)})") from None


@functools.lru_cache(maxsize=None)
def _ms_pairs() -> tuple[dict, dict]:
    import mindspore as ms

    to_torch = {getattr(ms, "bool_" if name == "bool" else name): dtype for name, dtype in _TABLE}
    return to_torch, {dtype: ms_dtype for ms_dtype, dtype in to_torch.items()}


def element_type(ms_dtype):
    """MindSpore hands Custom's dtype inference a TensorType wrapper; unwrap it to the element type."""
    return ms_dtype.element_type() if hasattr(ms_dtype, "element_type") else ms_dtype


def to_torch(ms_dtype) -> torch.dtype:
    dtype = element_type(ms_dtype)
    try:
        return _ms_pairs()[0][dtype]
    except KeyError:
        raise TypeError(f"MindSpore dtype {dtype} has no torch equivalent") from None


def to_ms(torch_dtype: torch.dtype):
    try:
        return _ms_pairs()[1][torch_dtype]
    except KeyError:
        raise TypeError(f"torch dtype {torch_dtype} has no MindSpore equivalent") from None


def tensor_types(torch_dtypes) -> list:
    """MindSpore tensor types of these torch dtypes, as an operator's dtype inference answers. Tensor types, not
    element types: given a bare element type, GRAPH_MODE treats a 0-dim output as a Python scalar and the Cell
    returns a float instead of a Tensor."""
    from mindspore.common import dtype as mstype

    return [mstype.TensorType(to_ms(d)) for d in torch_dtypes]
