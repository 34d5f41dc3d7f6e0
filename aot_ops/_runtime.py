"""Reading ms_ext's C runtime in a library: the last error text (where MindSpore does not show it) and the
number of live per-kernel states."""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path


@functools.lru_cache(maxsize=None)
def _handle(library: str) -> ctypes.CDLL:
    # dlopen of a path MindSpore already loaded returns the same object, so this reads MindSpore's copy.
    lib = ctypes.CDLL(library)
    for fn in (lib.ms_ext_last_error, lib.ms_ext_last_error_any_thread):
        fn.restype = ctypes.c_char_p
        fn.argtypes = []
    lib.ms_ext_live_kernel_states.restype = ctypes.c_int64
    return lib


def last_error(library: str | Path, any_thread: bool = True) -> str:
    """The last failure text recorded by an ms_ext library ("" if none).

    `any_thread=True` returns the most recent failure on any thread (MindSpore may launch on a worker thread);
    False returns the calling thread's.
    """
    lib = _handle(str(Path(library).resolve()))
    raw = lib.ms_ext_last_error_any_thread() if any_thread else lib.ms_ext_last_error()
    return raw.decode("utf-8", errors="replace")


def live_kernel_states(library: str | Path) -> int:
    """How many per-kernel state objects of the library are alive (created in Init hooks, freed by MindSpore
    when it destroys the kernel)."""
    return int(_handle(str(Path(library).resolve())).ms_ext_live_kernel_states())
