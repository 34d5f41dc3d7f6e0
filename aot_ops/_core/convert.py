"""Tensors between torch and MindSpore (CPU, by copy or as views of the same memory), keeping dtypes numpy lacks
or misnames."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import torch

from .dtypes import to_torch as _dtype_to_torch


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
    """A torch copy of `x` (one copy; bfloat16 travels as its int16 bits, without widening)."""
    return _over(np.array(x.asnumpy()))  # (np.array keeps 0-dim arrays 0-dim, unlike np.ascontiguousarray)


def torch_view(x: ms.Tensor) -> torch.Tensor:
    """A torch tensor over `x`'s own memory (no copy): a MindSpore Parameter's asnumpy() is its memory, and the
    array keeps that memory alive; writes on either side are seen by the other (checked on MindSpore 2.10's CPU
    backend, both modes, for forward calls, Assign and optimizer updates). MindSpore's own set_data replaces the
    memory: the view then keeps the old values."""
    return _over(x.asnumpy())


def _over(array: np.ndarray) -> torch.Tensor:
    if array.dtype.name == "bfloat16":  # MindSpore's numpy bfloat16 (ml_dtypes), which torch does not know
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    # MindSpore returns uint64 as numpy's `ulonglong`, which torch rejects; the same bytes as `<u8` it accepts.
    return torch.from_numpy(array.view(np.dtype(array.dtype.str)))


def owned_view(parameter: ms.Parameter, requires_grad: bool | None = None) -> torch.Tensor:
    """torch_view of a Parameter, marked as that Parameter's memory: a module given this tensor (as a parameter
    when `requires_grad` is given, else as a buffer) is ported with share_weights=True onto the Parameter itself,
    without a copy (owning_parameter)."""
    view = torch_view(parameter)
    if requires_grad is not None:
        view = torch.nn.Parameter(view, requires_grad=requires_grad)
    view._aot_ops_owner = parameter
    return view


def owning_parameter(t: torch.Tensor) -> ms.Parameter | None:
    """The Parameter whose whole memory `t` is (a tensor made by owned_view, not since given other data), or None."""
    owner = getattr(t, "_aot_ops_owner", None)
    if owner is None or t.dtype != _dtype_to_torch(owner.dtype) or tuple(t.shape) != tuple(owner.shape):
        return None
    return owner if t.data_ptr() == torch_view(owner).data_ptr() else None

