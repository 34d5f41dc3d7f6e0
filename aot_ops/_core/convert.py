"""Tensors between torch and MindSpore (CPU, by copy), keeping dtypes numpy lacks or misnames."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import torch


def to_ms(t: torch.Tensor) -> ms.Tensor:
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16; float32 holds every bfloat16 value exactly
        return ms.Tensor(t.float().numpy()).astype(ms.bfloat16)
    return ms.Tensor(t.numpy())


def to_torch(x: ms.Tensor) -> torch.Tensor:
    if x.dtype == ms.bfloat16:
        return torch.from_numpy(x.astype(ms.float32).asnumpy()).to(torch.bfloat16)
    array = x.asnumpy()
    # MindSpore returns uint64 as numpy's `ulonglong`, which torch rejects; the same bytes as `<u8` it accepts.
    # (np.array keeps 0-dim arrays 0-dim, unlike np.ascontiguousarray.)
    return torch.from_numpy(np.array(array.view(np.dtype(array.dtype.str))))
