"""The C heap's free memory handed back to the system.

glibc keeps what a process frees: chunks below its mmap threshold (which rises to 32 MB once a bigger one is freed)
stay in the heap for reuse, and freed temporaries between longer-lived allocations are holes the heap keeps. Code
that makes one long-lived buffer per step out of temporaries of its size (repacking each weight of a checkpoint)
then ends with about the temporaries' total held beside its result. malloc_trim(0) returns the free pages,
wherever they lie in the heap (glibc >= 2.8)."""
from __future__ import annotations

import ctypes
import functools
import linecache


@functools.cache
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to call
        return None


def release_free_memory() -> None:
    """Hands the C heap's free pages back to the system (glibc); nothing elsewhere."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def release_tracing_memory() -> None:
    """What tracing a model leaves behind and nothing keeps, handed back: the lines of the source files
    torch.export's tracer read (linecache keeps every file it reads, 5 MB for a transformers model; they are read
    again when a traceback needs them; sources registered without a file, as torch.fx registers its generated code,
    stay), and the heap's free pages (about 20 MB of the tracer's freed objects for a 1.1B Llama: the size of a
    small model's whole port overhead)."""
    for name, entry in list(linecache.cache.items()):
        if len(entry) == 4 and entry[1] is not None:  # (size, modification time, lines, path): a file's lines
            linecache.cache.pop(name, None)
    release_free_memory()
