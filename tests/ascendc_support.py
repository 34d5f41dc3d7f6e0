"""What the Ascend C tests share: NaN-filled outputs and the numpy references that mirror the kernels' roundings."""
from __future__ import annotations

import numpy as np
import torch

ORDERS = ("in_order", "reversed", "threads")


def nan_like(t: torch.Tensor) -> torch.Tensor:
    """An output buffer full of NaN, so any element the kernel does not write fails the comparison."""
    return torch.full_like(t, float("nan"))


def half_bits(t: torch.Tensor | np.ndarray) -> np.ndarray:
    array = t.numpy() if isinstance(t, torch.Tensor) else t
    assert array.dtype == np.float16
    return array.view(np.uint16)


def leaky_relu_reference(x: np.ndarray, negative_slope: float) -> np.ndarray:
    """leaky_relu_custom's arithmetic in numpy: max(x,0) + round16(min(x,0) * round16(slope)), each step computed
    in float32 and rounded to float16 once."""
    slope = np.float32(np.float16(negative_slope))
    positive = np.maximum(x, np.float16(0))
    negative = (np.minimum(x, np.float16(0)).astype(np.float32) * slope).astype(np.float16)
    return (positive.astype(np.float32) + negative.astype(np.float32)).astype(np.float16)


def sample(shape, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=gen) * 3).to(dtype)
