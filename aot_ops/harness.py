"""Call an aot entry point exactly as MindSpore does, without MindSpore.

    from aot_ops import harness
    y = torch.empty(2, 2)
    harness.call(aot_ops.library_path(), "LeakyRelu", inputs=[x], outputs=[y])

The seven arguments are built the way MindSpore builds them: `params` holds inputs, then outputs, then
workspaces; `ndims`/`shapes`/`dtypes` cover inputs and outputs only; a 0-dim tensor has a NULL shape; dtypes are
MindSpore's strings. Useful for testing kernels in isolation, on CUDA streams, or with malformed arguments.
"""
from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Sequence

import torch

from ._clib import last_error, open_library
from ._dtypes import checked_ms_name


class AotCallError(RuntimeError):
    """The entry point failed; the message is the text it recorded (what MindSpore would show)."""


def _load(library: str) -> ctypes.CDLL:
    return open_library(library)


def _shim_library(target: ctypes.CDLL) -> ctypes.CDLL:
    """The library whose ms_ext_guarded_call (the C++ frame that catches exceptions) is used: the target's own,
    or the bundled library's when the target was not built with ms_ext."""
    if hasattr(target, "ms_ext_guarded_call"):
        return target
    from ._bundled import library_path

    return _load(str(library_path()))


def call(library: str | Path, symbol: str, inputs: Sequence[torch.Tensor | None], outputs: Sequence[torch.Tensor],
         *, workspaces: Sequence[torch.Tensor] = (), dtypes: Sequence[str] | None = None,
         nparam: int | None = None, stream: int | None = None, extra: int | None = None) -> None:
    """Run `symbol` from `library` on torch tensors (CPU or CUDA), writing into `outputs`.

    `dtypes` overrides the dtype strings (to test unusual or invalid ones), `nparam` the parameter count.
    A None input is passed as MindSpore passes a None argument: a NULL pointer with dtype "none".
    Raises AotCallError with the entry point's error text when it fails.
    """
    lib = _load(str(Path(library).resolve()))
    function = getattr(lib, symbol)  # AttributeError names the missing symbol
    tensors = list(inputs) + list(outputs)
    for t in tensors:
        if t is not None and not t.is_contiguous():
            raise ValueError("MindSpore passes contiguous buffers; make the tensors contiguous")
    n = len(tensors)
    params = (ctypes.c_void_p * (n + len(workspaces)))()
    ndims = (ctypes.c_int * max(n, 1))()
    shapes = (ctypes.POINTER(ctypes.c_int64) * max(n, 1))()
    dtype_strs = (ctypes.c_char_p * max(n, 1))()
    keep_alive = []
    for i, t in enumerate(tensors):
        if t is None:
            params[i], ndims[i], shapes[i], dtype_strs[i] = None, 0, None, b"none"
            continue
        params[i] = t.data_ptr() or None
        ndims[i] = t.dim()
        if t.dim() > 0:  # MindSpore passes NULL for a 0-dim tensor's shape
            arr = (ctypes.c_int64 * t.dim())(*t.shape)
            keep_alive.append(arr)
            shapes[i] = ctypes.cast(arr, ctypes.POINTER(ctypes.c_int64))
        dtype_strs[i] = (dtypes[i] if dtypes is not None else checked_ms_name(t.dtype)).encode()
    for j, w in enumerate(workspaces):
        params[n + j] = w.data_ptr()
    shim = _shim_library(lib)
    fn_ptr = ctypes.cast(function, ctypes.c_void_p)
    status = shim.ms_ext_guarded_call(
        fn_ptr, ctypes.c_int(len(params) if nparam is None else nparam), params, ndims, shapes, dtype_strs,
        ctypes.c_void_p(stream), ctypes.c_void_p(extra))
    if status != 0:
        raise AotCallError(last_error(shim))
