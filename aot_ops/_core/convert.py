"""Tensors between torch and MindSpore (CPU, by copy), keeping dtypes numpy lacks or misnames."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import torch


def to_ms(t: torch.Tensor) -> ms.Tensor:
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: its bits travel as int16 (one copy, no widening)
        return ms.Tensor(t.view(torch.int16).numpy()).view(ms.bfloat16)
    return ms.Tensor(t.numpy())


def ms_view(t: torch.Tensor) -> ms.Tensor:
    """A MindSpore Tensor over `t`'s own memory (no copy; `t` must be contiguous and stay alive while it is used):
    for a value MindSpore copies at once, such as a Parameter's initial data, so that a model's weights are not
    held three times while a cell is built."""
    if not t.is_contiguous():
        raise ValueError("ms_view: the tensor must be contiguous")
    if t.dtype == torch.bfloat16:
        return ms.Tensor.from_numpy(t.detach().view(torch.int16).numpy()).view(ms.bfloat16)
    return ms.Tensor.from_numpy(t.detach().numpy())


def to_torch(x: ms.Tensor) -> torch.Tensor:
    if x.dtype == ms.bfloat16:
        return torch.from_numpy(x.astype(ms.float32).asnumpy()).to(torch.bfloat16)
    array = x.asnumpy()
    # MindSpore returns uint64 as numpy's `ulonglong`, which torch rejects; the same bytes as `<u8` it accepts.
    # (np.array keeps 0-dim arrays 0-dim, unlike np.ascontiguousarray.)
    return torch.from_numpy(np.array(array.view(np.dtype(array.dtype.str))))
