"""Where aot_ops' own files are: the libraries built at install time and the sources shipped with the package."""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
LIB_DIR = PACKAGE_DIR / "lib"
CPU_LIBRARY = "libaot_ops_cpu.so"
ASCENDC_LIBRARY = "libaot_ops_ascendc.so"
CUDA_LIBRARY = "libaot_ops_cuda.so"
LIBRARIES = {"cpu": CPU_LIBRARY, "ascendc": ASCENDC_LIBRARY, "cuda": CUDA_LIBRARY}


def library_path(kind: str = "cpu") -> Path:
    """Absolute path of a library bundled with aot_ops: "cpu" (the ATen kernels, the default), "ascendc" (the
    Ascend C kernels on the CPU emulator) or "cuda" (the CUDA kernels, where setup.py could build them).

    Use it to build `ops.Custom(f"{aot_ops.library_path()}:LeakyRelu", ..., func_type="aot")` by hand. Raises
    FileNotFoundError when it was not built (with the reason) and StaleLibraryError when it was built against
    other torch or MindSpore versions than the installed ones.
    """
    from ._build import build_info

    if kind not in LIBRARIES:
        raise ValueError(f"aot_ops.library_path: unknown library {kind!r} (one of {', '.join(LIBRARIES)})")
    path = LIB_DIR / LIBRARIES[kind]
    if not path.is_file():
        if kind == "cuda":
            from ._build import cuda

            why = cuda.why_not_linkable(use_torch=True) or "TORCH_CUDA_ARCH_LIST was not set at install time"
            raise FileNotFoundError(f"{path} was not built: {why}")
        raise FileNotFoundError(
            f"{path} is missing: the kernels are built at install time (`pip install --no-build-isolation -e .`, "
            "or run ./run.sh test which does it)")
    build_info.check(path)
    return path


def source_dir(name: str) -> Path:
    """A source tree aot_ops needs at run time: "ms_ext" (headers and C runtime, compiled into every library) or
    "kernels" (the bundled kernel sources: CUDA add2, the Ascend C NPU project).

    A checkout or an editable install uses the top-level folder; a wheel carries a copy inside the package as
    `_<name>` (setup.py puts it there).
    """
    for candidate in (PACKAGE_DIR / f"_{name}", PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"aot_ops' {name} sources are not next to {PACKAGE_DIR}: the installation is incomplete "
                            "(reinstall aot_ops)")


def include_paths(use_torch: bool = True) -> list[str]:
    """The include folders of an ms_ext kernel: ms_ext's headers, and torch's with `use_torch` (for a build system
    other than aot_ops' own: CMake, a Makefile, torch.utils.cpp_extension)."""
    from ._build import toolchain

    paths = [str(toolchain.ms_ext_include_dir())]
    if use_torch:
        paths += list(toolchain.torch_info().include_dirs)
    return paths
