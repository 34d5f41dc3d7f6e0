"""Call an aot entry point exactly as MindSpore does, without MindSpore.

    from aot_ops import harness
    y = torch.empty(2, 2)
    harness.call(aot_ops.library_path(), "LeakyRelu", inputs=[x], outputs=[y])

The seven arguments are built the way MindSpore builds them: `params` holds inputs, then outputs, then
workspaces; `ndims`/`shapes`/`dtypes` cover inputs and outputs only; a 0-dim tensor has a NULL shape; dtypes are
MindSpore's strings. Useful for testing kernels in isolation, on CUDA streams, or with malformed arguments.

With `attrs`, the call gets the attributes MindSpore would give a primitive carrying them: they travel in an
ms_ext call extra (ms_ext/c_api.h), the kernel's Init hook runs first as MindSpore runs it (its state kept for
the launch, scratch buffers allocated as it asks), and everything is freed afterwards.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Mapping, Sequence

import torch

from ._native.opener import last_error, open_library
from ._core.dtypes import checked_ms_name
from ._core.packed_attrs import pack
from .errors import Error


class AotCallError(Error, RuntimeError):
    """The entry point failed; the message is the text it recorded (what MindSpore would show)."""


def _load(library: str | Path) -> ctypes.CDLL:
    library = str(library)
    # A relative path is resolved against the working directory of the moment, so only absolute ones are cached.
    return open_library(_resolved(library) if Path(library).is_absolute() else str(Path(library).resolve()))


@functools.lru_cache(maxsize=256)
def _resolved(library: str) -> str:
    # Resolving walks every component of the path (an lstat each): half the cost of a small call when repeated.
    return str(Path(library).resolve())


def _shim_library(target: ctypes.CDLL) -> ctypes.CDLL:
    """The library whose ms_ext_guarded_call (the C++ frame that catches exceptions) is used: the target's own,
    or the bundled library's when the target was not built with ms_ext."""
    if hasattr(target, "ms_ext_guarded_call"):
        return target
    from ._build.bundled import library_path

    return _load(str(library_path()))


def call(library: str | Path, symbol: str, inputs: Sequence[torch.Tensor | None], outputs: Sequence[torch.Tensor],
         *, workspaces: Sequence[torch.Tensor] = (), dtypes: Sequence[str] | None = None,
         nparam: int | None = None, stream: int | None = None, extra: int | None = None,
         attrs: Mapping[str, object] | None = None) -> None:
    """Run `symbol` from `library` on torch tensors (CPU or CUDA), writing into `outputs`.

    `dtypes` overrides the dtype strings (to test unusual or invalid ones), `nparam` the parameter count.
    A None input is passed as MindSpore passes a None argument: a NULL pointer with dtype "none".
    `attrs`: the primitive's attributes; the kernel's Init hook (when it has one) runs before the launch.
    Raises AotCallError with the entry point's error text when it fails.
    """
    if attrs is not None:
        if extra is not None:
            raise ValueError("give attrs or extra, not both")
        with _CallExtra(_load(library), attrs) as own:
            init = getattr(own.library, f"{symbol}Init", None)
            if init is not None:
                own.init(init, list(inputs) + list(outputs), dtypes)
                if not workspaces:
                    workspaces = [torch.empty(n, dtype=torch.uint8, device=_device(inputs, outputs))
                                  for n in own.workspace()]
            return call(library, symbol, inputs, outputs, workspaces=workspaces, dtypes=dtypes, nparam=nparam,
                        stream=stream, extra=own.address)
    lib = _load(library)
    function = getattr(lib, symbol)  # AttributeError names the missing symbol
    tensors = list(inputs) + list(outputs)
    for t in tensors:
        if t is not None and not t.is_contiguous():
            raise ValueError("MindSpore passes contiguous buffers; make the tensors contiguous")
    n = len(tensors)
    params = (ctypes.c_void_p * (n + len(workspaces)))()
    for i, t in enumerate(tensors):
        params[i] = None if t is None else (t.data_ptr() or None)
    ndims, shapes, dtype_strs, _keep_alive = _describe(tensors, dtypes)
    for j, w in enumerate(workspaces):
        params[n + j] = w.data_ptr()
    shim = _shim_library(lib)
    fn_ptr = ctypes.cast(function, ctypes.c_void_p)
    status = shim.ms_ext_guarded_call(
        fn_ptr, ctypes.c_int(len(params) if nparam is None else nparam), params, ndims, shapes, dtype_strs,
        ctypes.c_void_p(stream), ctypes.c_void_p(extra))
    if status != 0:
        raise AotCallError(last_error(shim))


def _describe(tensors: Sequence[torch.Tensor | None], dtypes: Sequence[str] | None):
    """The ndims, shapes and dtypes arrays MindSpore passes for these tensors (and the shape arrays to keep alive):
    a 0-dim tensor has a NULL shape, a None argument rank 0 and dtype "none"."""
    n = max(len(tensors), 1)
    ndims, shapes, names = (ctypes.c_int * n)(), (ctypes.POINTER(ctypes.c_int64) * n)(), (ctypes.c_char_p * n)()
    keep_alive = []
    for i, t in enumerate(tensors):
        if t is None:
            names[i] = b"none"
            continue
        ndims[i] = t.dim()
        if t.dim() > 0:
            keep_alive.append((ctypes.c_int64 * t.dim())(*t.shape))
            shapes[i] = ctypes.cast(keep_alive[-1], ctypes.POINTER(ctypes.c_int64))
        names[i] = (dtypes[i] if dtypes is not None else checked_ms_name(t.dtype)).encode()
    return ndims, shapes, names, keep_alive


def _device(inputs, outputs) -> torch.device:
    return next((t.device for t in list(inputs) + list(outputs) if t is not None), torch.device("cpu"))


class _CallExtra:
    """An ms_ext call extra holding packed attributes (and, after Init, the kernel's state), freed on exit."""

    def __init__(self, library: ctypes.CDLL, attrs: Mapping[str, object]):
        if not hasattr(library, "ms_ext_call_extra_new"):
            raise AotCallError("the library was built without ms_ext call extras (rebuild it with this aot_ops) "
                               "and cannot take attributes outside MindSpore")
        self.library = library
        text = pack(attrs).encode()
        self.address = library.ms_ext_call_extra_new(text, len(text))
        if not self.address:
            raise AotCallError(last_error(library))

    def init(self, init, tensors: Sequence[torch.Tensor | None], dtypes: Sequence[str] | None) -> None:
        """Runs the Init hook with the arrays MindSpore passes it: ranks, shapes and dtypes of inputs and outputs."""
        ndims, shapes, names, _keep_alive = _describe(tensors, dtypes)
        init.restype, init.argtypes = ctypes.c_int, [ctypes.c_void_p] * 4
        if init(ndims, shapes, names, self.address) != 0:
            raise AotCallError(last_error(self.library))

    def workspace(self) -> list[int]:
        """The byte size of each scratch buffer the Init hook asked for."""
        count = self.library.ms_ext_call_extra_workspace(self.address, None, 0)
        sizes = (ctypes.c_size_t * max(count, 1))()
        self.library.ms_ext_call_extra_workspace(self.address, sizes, count)
        return list(sizes[:count])

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.library.ms_ext_call_extra_free(self.address)
