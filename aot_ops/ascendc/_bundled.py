"""The bundled Ascend C kernels (kernels/ascendc/kernels), declared exactly as a user declares their own with
aot_ops.ascendc.load: setup.py generates the bundled library's emulator launches, MindSpore entries and torch
entries from these declarations (the same code generator), and the NPU project comes from them too.

Each tiling function states what its kernel silently requires (kernels/ascendc/emulator/INVARIANTS.md: every copy a
whole number of 32-B blocks, every queue's buffers within the Unified Buffer); a shape that breaks it runs the ATen
fallback instead. The numbers mirror the kernels' own constants (buffers per queue, tiles per buffer, ...); each
function's docstring says which.

Imported by setup.py before anything is built: this module needs torch (the fallbacks' schemas), never MindSpore.
"""
from __future__ import annotations

import functools
from pathlib import Path

from ._declare import Kernel
from ._tiling import maximum, minimum, require

NAME = "ascendc"  # the library's name: torch.ops.ascendc.<kernel>

UINT32_MAX = 2 ** 32 - 1


def _cores(block_dim) -> None:
    require((block_dim >= 1) & (block_dim <= 65535), "block_dim outside [1, 65535]")


def add_custom_tiling(x, y, *, block_dim, ub_bytes):
    """add_custom cuts each core's share into 8 tiles, double-buffered, for x, y and z in fp16 (16 per 32-B block):
    numel must be a positive multiple of 16 * 8 * 2 * block_dim, and 3 queues x 2 buffers of one tile must fit."""
    require(x == y, "x and y differ in shape (the kernel does not broadcast)")
    _cores(block_dim)
    n = x.numel()
    require((n > 0) & (n % (256 * block_dim) == 0), "numel is not a positive multiple of 256 * block_dim")
    tile_bytes = n // block_dim // 8 // 2 * 2
    require(3 * 2 * tile_bytes <= ub_bytes, "3 queues x 2 buffers of one tile exceed the Unified Buffer")
    return {"totalLength": n}


def leaky_relu_custom_tiling(x, *, block_dim, ub_bytes, negative_slope):
    """leaky_relu_custom spreads 32-B blocks (16 fp16) over the cores and cuts each core's range into tiles of at
    most 4096 elements (the last one may be shorter); a tile takes 5 buffers (2 in, 2 out, 1 scratch)."""
    _cores(block_dim)
    n = x.numel()
    require((n > 0) & (n % 16 == 0), "numel is not a positive multiple of 16 (32 B of fp16)")
    largest_share = (n // 16 + block_dim - 1) // block_dim * 16
    by_ub = ub_bytes // (5 * 2) // 16 * 16
    tile = minimum(minimum(largest_share, 4096), by_ub)
    require(tile >= 16, "a tile of 16 elements does not fit the Unified Buffer")
    return {"totalLength": n, "tileLength": tile, "negativeSlope": negative_slope}


def softmax_custom_tiling(x, *, block_dim, ub_bytes):
    """softmax_custom spreads the rows (over the last dimension) over the cores in tiles of at most 8 rows; a row is
    a whole number of 32-B blocks (8 fp32) and a tile takes 4 buffers besides one row of work space and 32 B."""
    _cores(block_dim)
    cols = x[-1]
    n = x.numel()
    require(n > 0, "empty input")
    require(cols % 8 == 0, "a row is not a multiple of 8 elements (32 B of fp32)")
    require(n <= UINT32_MAX, "more than 2^32-1 elements")
    rows = n // cols
    fixed_bytes = (cols * 4 + 31) // 32 * 32 + 32
    by_ub = maximum(ub_bytes - fixed_bytes, 0) // (4 * cols * 4)
    tile = minimum(minimum((rows + block_dim - 1) // block_dim, 8), by_ub)
    require(tile >= 1, "one row does not fit the Unified Buffer")
    return {"rows": rows, "cols": cols, "tileRows": tile}


KERNELS = {
    "add_custom": Kernel(
        inputs=["x", "y"], outputs=["z"], dtypes=["float16"], scalars={"totalLength": "uint32"},
        tiling=add_custom_tiling, fallback="aten::add.Tensor", output_like={"z": "x"}),
    "leaky_relu_custom": Kernel(
        inputs=["x"], outputs=["y"], dtypes=["float16"],
        scalars={"totalLength": "uint32", "tileLength": "uint32", "negativeSlope": "float32"},
        tiling=leaky_relu_custom_tiling, fallback="aten::leaky_relu", output_like={"y": "x"},
        attrs={"negative_slope": 0.01}),
    "softmax_custom": Kernel(
        inputs=["x"], outputs=["y"], dtypes=["float32"],
        scalars={"rows": "uint32", "cols": "uint32", "tileRows": "uint32"},
        tiling=softmax_custom_tiling, fallback="aten::softmax.int", output_like={"y": "x"},
        fallback_args={"dim": -1}),
}


def kernel_sources(kernels_dir: Path) -> list[Path]:
    """The kernels' sources in `kernels_dir` (kernels/ascendc/kernels), one file per kernel."""
    return [kernels_dir / f"{name}.cpp" for name in KERNELS]


@functools.lru_cache(maxsize=None)
def declarations() -> dict[str, Kernel]:
    """KERNELS, checked as ascendc.load checks a user's declarations."""
    return {name: kernel.checked(name) for name, kernel in KERNELS.items()}


def library_source() -> str:
    """The C++ setup.py compiles into libaot_ops_ascendc beside the kernels: what ascendc.load generates for a
    user's library, with the emulator settings and path counts linked in rather than opened."""
    from . import _codegen as codegen

    return codegen.library_source(NAME, declarations(), codegen.tilings(declarations()), runtime_library=None)


@functools.lru_cache(maxsize=None)
def library():
    """The bundled kernels as the library object aot_ops.ascendc.load returns for a user's kernels: its MindSpore
    operators (library().operator(...)), its torch operators (torch.ops.ascendc.*, registered by torch_ops)."""
    from .._build.bundled import library_path
    from .._core.library import Library
    from ._library import AscendcLibrary

    built = Library(NAME, library_path("ascendc"), key="bundled", rebuilt=False)
    # Its NPU project is written on demand (npu_project()), not at import: that needs a writable cache.
    return AscendcLibrary(NAME, built, declarations(), npu_project=None)


def npu_project() -> Path:
    """The CANN project of the bundled kernels, generated from their declarations as `ascendc.load` generates a
    user library's (lib.npu_project), into the cache: kernels/ascendc/kernels compiled for the AI core, host
    launches with the same compiled tilings. python -m aot_ops.ascendc.npu builds it."""
    from .._build import cache
    from .._native.paths import source_dir
    from . import _codegen as codegen
    from ._library import write_npu_project

    kernels = declarations()
    return write_npu_project(cache.name_dir("aot_ops_ascendc_bundled") / "npu", NAME, kernels,
                             codegen.tilings(kernels), kernel_sources(source_dir("kernels") / "ascendc" / "kernels"))
