"""Where nvcc and the CUDA runtime are, which GPU architectures to compile for, and whether CUDA code can run here.

nvcc only needs headers to compile, so `.cu` sources build on a machine without a GPU (the CPU torch wheel even
ships the c10/cuda and ATen/cuda headers). Linking and loading need more: the CUDA runtime library, a CUDA build of
torch when the source uses torch, and a driver to run anything at all.
"""
from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
from pathlib import Path

from ..errors import Error

CUDA_SUFFIXES = (".cu",)


class CudaSetupError(Error, RuntimeError):
    """CUDA sources cannot be compiled as configured (no nvcc, no architecture list)."""


def is_cuda_source(path: str | os.PathLike) -> bool:
    return str(path).endswith(CUDA_SUFFIXES)


def cuda_home() -> Path | None:
    """$CUDA_HOME / $CUDA_PATH, else the toolkit that the nvcc on PATH belongs to, else /usr/local/cuda."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            return Path(os.environ[var])
    candidates = []
    found = shutil.which("nvcc")
    if found:
        # /usr/local/cuda/bin/nvcc -> /usr/local/cuda; a symlink resolves into the real tree. (A wrapper script
        # such as /usr/local/bin/nvcc has no toolkit next to it: fall through to the default location.)
        candidates.append(Path(found).resolve().parent.parent)
    candidates.append(Path("/usr/local/cuda"))
    for home in candidates:
        if (home / "bin" / "nvcc").is_file() and (home / "include" / "cuda_runtime.h").is_file():
            return home
    return None


def nvcc() -> str | None:
    home = cuda_home()
    if home is not None and (home / "bin" / "nvcc").is_file():
        return str(home / "bin" / "nvcc")
    return shutil.which("nvcc")


def runtime_lib_dir() -> Path | None:
    """The folder holding libcudart.so (linked into every library with CUDA sources)."""
    home = cuda_home()
    if home is None:
        return None
    for sub in ("lib64", "lib", "targets/x86_64-linux/lib"):
        if (home / sub / "libcudart.so").exists():
            return home / sub
    return None


_ARCH = re.compile(r"^(\d+)\.(\d+)([af]?)(\+PTX)?$")


def arch_flags(arch_list: str | None = None) -> list[str]:
    """`-gencode` flags for TORCH_CUDA_ARCH_LIST ("8.0;9.0+PTX", spaces or semicolons).

    "9.0" -> -gencode=arch=compute_90,code=sm_90; "+PTX" also embeds compute_90 PTX so newer GPUs can JIT it.
    The list is required: there is no GPU to ask on a build machine, and guessing silently produces a library
    that fails at its first launch on the real GPU ("no kernel image is available").
    """
    text = os.environ.get("TORCH_CUDA_ARCH_LIST") if arch_list is None else arch_list
    if not text or not text.strip():
        raise CudaSetupError(
            "TORCH_CUDA_ARCH_LIST is not set: name the GPU architectures to compile for, e.g. "
            "TORCH_CUDA_ARCH_LIST=\"9.0\" for H100 or \"8.0;9.0+PTX\" (`nvidia-smi --query-gpu=compute_cap "
            "--format=csv` prints it on the GPU machine)")
    flags: list[str] = []
    for item in re.split(r"[;\s]+", text.strip()):
        match = _ARCH.match(item)
        if not match:
            raise CudaSetupError(f"TORCH_CUDA_ARCH_LIST: cannot read {item!r} (expected e.g. 9.0 or 9.0+PTX)")
        major, minor, suffix, ptx = match.groups()
        arch = f"{major}{minor}{suffix}"
        flags.append(f"-gencode=arch=compute_{arch},code=sm_{arch}")
        if ptx:
            flags.append(f"-gencode=arch=compute_{arch},code=compute_{arch}")
    return flags


def nvcc_cflags(use_torch: bool) -> list[str]:
    """Flags for .cu sources. MS_EXT_TARGET_CUDA makes ms_ext entry points in them CUDA ones (device views,
    MindSpore's stream); a CPU torch wheel ships the c10/cuda headers but not the header CMake generates for them,
    whose only content (export macros) the C10_CUDA_NO_CMAKE_CONFIGURE_FILE switch lets c10 define itself."""
    from . import toolchain

    flags = ["-std=c++20", "-O2", "-Xcompiler", "-fPIC", "-DMS_EXT_TARGET_CUDA", f"-I{toolchain.ms_ext_include_dir()}",
             *arch_flags()]
    if use_torch:
        info = toolchain.torch_info()
        flags.append(f"-D_GLIBCXX_USE_CXX11_ABI={info.cxx11_abi}")
        for inc in info.include_dirs:
            flags += ["-isystem", inc]  # nvcc wants the directory as a separate argument
        if not any((Path(inc) / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").exists() for inc in info.include_dirs):
            flags.append("-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")
    return flags


def host_cflags() -> list[str]:
    """Flags for C++ (non-.cu) sources whose ms_ext entry points run on CUDA: the bundled ATen kernels build for the
    GPU from the same sources, with CUDA placement and the CUDA runtime headers."""
    from . import toolchain

    home = cuda_home()
    flags = ["-DMS_EXT_TARGET_CUDA"] + (["-isystem", str(home / "include")] if home else [])
    includes = toolchain.torch_info().include_dirs
    if not any((Path(inc) / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h").exists() for inc in includes):
        flags.append("-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")
    return flags


@functools.lru_cache(maxsize=None)
def driver_available() -> bool:
    """Whether the CUDA driver library can be loaded (it comes with the GPU driver, not with the toolkit)."""
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def torch_has_cuda() -> bool:
    from . import toolchain

    return (Path(toolchain.torch_info().lib_dir) / "libc10_cuda.so").exists()


def why_not_linkable(use_torch: bool) -> str | None:
    """None when a library with CUDA sources can be linked and load-checked here, else the reason it cannot."""
    if runtime_lib_dir() is None:
        return "the CUDA runtime library (libcudart.so) was not found (set CUDA_HOME)"
    if use_torch and not torch_has_cuda():
        return ("torch here is a CPU build (no libc10_cuda/libtorch_cuda to link); install a CUDA build of torch "
                "to link and load CUDA kernels that use torch")
    if not driver_available():
        return ("no CUDA driver here (libcuda.so.1 cannot be loaded), so the library could not run; the sources "
                "were compiled, linking and the load check need a machine with a GPU")
    return None


def link_flags(use_torch: bool) -> list[str]:
    lib = runtime_lib_dir()
    flags = [f"-L{lib}", f"-Wl,-rpath,{lib}", "-lcudart"] if lib else ["-lcudart"]
    if use_torch:
        flags += ["-lc10_cuda", "-ltorch_cuda"]
    return flags
