"""The Ascend C library's runtime knobs, without MindSpore or torch.library: where it is, which path its operators
took, and how its CPU emulator schedules cores.

    from aot_ops.ascendc import runtime as rt
    rt.reset_path_counts()
    ...                                   # run aot_ops.ascendc.add_custom() or torch.ops.ascendc.add_custom
    rt.path_count("add_custom", "kernel")  # calls that ran the Ascend C kernel on the emulator
    rt.path_count("add_custom", "aten")    # calls that fell back to ATen (dtypes or tiling not met)
    with rt.emulator(order="reversed", ub_bytes=256 * 1024):
        ...                               # cores run last to first, with a 910A-sized Unified Buffer
"""
from __future__ import annotations

import contextlib

from .._native.opener import last_error, open_library
from .._build.bundled import library_path

UB_910B = 192 * 1024
UB_910A = 256 * 1024


def _lib():
    return open_library(library_path("ascendc"))


def path_count(op: str, path: str) -> int:
    """How many calls of kernel `op` (its declared name: "add_custom", a user kernel's "mul_custom") took `path`
    ("kernel": the Ascend C kernel on the emulator; "aten": the ATen fallback) since the last reset, from MindSpore
    and torch alike. Set AOT_OPS_ASCENDC_LOG=1 to also print every decision with the unmet requirement."""
    return int(_lib().ascendc_path_count(op.encode(), path.encode()))


def reset_path_counts() -> None:
    _lib().ascendc_path_count_reset()


def configure_emulator(order: str = "in_order", ub_bytes: int = UB_910B) -> None:
    """Core order ("in_order", "reversed", "threads") and per-core UB size of every later launch in this process."""
    if _lib().ascendc_emulator_configure(order.encode(), int(ub_bytes)) != 0:
        raise ValueError(last_error(_lib()))


def emulator_settings() -> tuple[str, int]:
    return _lib().ascendc_emulator_order().decode(), int(_lib().ascendc_emulator_ub_bytes())


@contextlib.contextmanager
def emulator(order: str = "in_order", ub_bytes: int = UB_910B):
    """configure_emulator for a `with` block, restoring the previous settings afterwards."""
    previous = emulator_settings()
    configure_emulator(order, ub_bytes)
    try:
        yield
    finally:
        configure_emulator(*previous)
