"""Reading ms_ext's C runtime in a library: the last error text (where MindSpore does not show it) and the
number of live per-kernel states."""
from __future__ import annotations

import functools
from pathlib import Path

from .._native.opener import open_library
from .mindspore_private import wait_for_queued_work


def _handle(library: str):
    # the same copy MindSpore loaded (dlopen returns it for the same path)
    return open_library(library)


@functools.cache
def _bundled():
    """The bundled ATen library's handle, found and checked (bundled.library_path) once: the process keeps the copy
    it loaded first whatever later happens to the file, and the port asks it for every node of a graph."""
    from .._build.bundled import library_path

    return _handle(str(library_path()))


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


def aten_launches() -> tuple[int, int]:
    """(forward, backward) launches of the generic ATen entry points of the bundled library so far: how many
    bridged calls a network makes (take the difference around a training step). Like the other counters here it
    first waits for the work PyNative still has queued, so every call made before it is counted."""
    wait_for_queued_work()
    lib = _bundled()
    return int(lib.aot_ops_aten_launches(0)), int(lib.aot_ops_aten_launches(1))


def program_launches(wait: bool = True) -> int:
    """Launches of the program entry (from_torch's fuse=True: one per forward graph, one per backward) so far.
    `wait=False`: the count now, without first waiting for PyNative's queued work, for a monitor on another
    thread (waiting there would synchronize the training thread's queue at every read)."""
    if wait:
        wait_for_queued_work()
    return int(_bundled().aot_ops_program_launches())


def program_seconds() -> float:
    """Wall time spent inside launches of the program entry so far: the ATen work of fused graphs. A step's time
    minus this is what MindSpore's framework around the two calls costs."""
    wait_for_queued_work()
    return _bundled().aot_ops_program_nanoseconds() * 1e-9


def program_counts() -> dict[str, int]:
    """What the bundled library's program entry keeps (kernels/aten/generic/program.cpp, ProgramRegistry):
    `held`, the program keys held by live Program objects (a ported cell's programs); `alive`, the parsed programs
    in memory (held, or used by a kernel MindSpore still has); `entries`, the registry's entries (keys held or
    alive); `parses`, the programs parsed so far in this process."""
    lib = _bundled()
    return {"held": int(lib.aot_ops_programs_held()), "alive": int(lib.aot_ops_programs_alive()),
            "entries": int(lib.aot_ops_program_entries()), "parses": int(lib.aot_ops_program_parses())}


def saved_sets() -> dict[str, int]:
    """The tensors fused forward programs keep in the bundled library for their backward programs
    (_port/programs/saved_in_library.py; program.cpp, SavedSets): `sets` and `bytes` kept now, and `dropped`, the
    sets dropped so far because their backward never ran (a gradient abandoned by an exception)."""
    wait_for_queued_work()
    lib = _bundled()
    return {"sets": int(lib.aot_ops_saved_sets()), "bytes": int(lib.aot_ops_saved_bytes()),
            "dropped": int(lib.aot_ops_saved_sets_dropped())}


def aten_call_refusal(attrs: dict, input_dtypes: list[str | None] | None,
                      allow_factories: bool = False) -> tuple[str, bool]:
    """(why the generic ATen entry refuses this call, "" when it runs it; whether its inputs' dtypes can still
    refuse it). `attrs`: the call's attributes as the kernel reads them (aten_op, aten_kinds, aten_arg_<i>, ...);
    `input_dtypes`: MindSpore dtype names of its inputs (None for a None input), or None when not known yet. The
    policy and the call rules are the kernel's own (kernels/aten/generic/aten_plan.h)."""
    import ctypes

    from .packed_attrs import pack

    lib = _bundled()
    dtypes = None if input_dtypes is None else ",".join(d or "" for d in input_dtypes).encode()
    checks = ctypes.c_int(0)
    why = lib.aot_ops_aten_call_refusal(pack(attrs).encode(), dtypes, int(allow_factories), ctypes.byref(checks))
    return why.decode("utf-8", "replace"), bool(checks.value)


def aten_refusal(qualified_name: str, allow_factories: bool = False) -> str:
    """Why the generic ATen entry refuses an operator ("aten::add_.Tensor"), "" when it runs it: the policy is the
    kernel's own (kernels/aten/generic/aten_op.cpp), asked before an operator is made."""
    lib = _bundled()
    return lib.aot_ops_aten_refusal(qualified_name.encode(), int(allow_factories)).decode("utf-8", "replace")
