"""Where aot_ops' own files are: the libraries built at install time and the sources shipped with the package."""
from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
LIB_DIR = PACKAGE_DIR / "lib"
CPU_LIBRARY = "libaot_ops_cpu.so"


def library_path(name: str = CPU_LIBRARY) -> Path:
    """Absolute path of a library bundled with aot_ops (the CPU ATen kernels by default).

    Use it to build `ops.Custom(f"{aot_ops.library_path()}:LeakyRelu", ..., func_type="aot")` by hand. Raises
    FileNotFoundError when it was not built and StaleLibraryError when it was built against other torch or
    MindSpore versions than the installed ones.
    """
    from ._build import build_info

    path = LIB_DIR / name
    if not path.is_file():
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
