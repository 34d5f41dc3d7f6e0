"""Where the compilers, headers and libraries are, and which flags an aot library needs.

Everything that decides how a source is compiled lives here, so the bundled kernels (setup.py), the
`python -m aot_ops build` command and `aot_ops.load` compile alike.
"""
from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .._native.paths import source_dir

# The MindSpore release whose AotExtra class layout ms_ext/src/aot_extra_abi0.cpp mirrors.
MINDSPORE_CONTRACT = "2.10"


def ms_ext_dir() -> Path:
    """The ms_ext tree (headers and C runtime sources), from a checkout or from inside an installed wheel."""
    return source_dir("ms_ext")


def ms_ext_include_dir() -> Path:
    return ms_ext_dir() / "include"


def ms_ext_runtime_sources() -> dict[str, list[Path]]:
    """The C runtime every aot library links, by role.

    `abi0` is the one translation unit that talks to MindSpore's AotExtra and must be compiled with MindSpore's
    C++ ABI (_GLIBCXX_USE_CXX11_ABI=0); the `plain` ones pass only C types and compile with either ABI.
    """
    src = ms_ext_dir() / "src"
    plain = ["last_error.cpp", "guarded_call.cpp", "kernel_states.cpp", "memory_probe.cpp", "attr_table.cpp"]
    return {"abi0": [src / "aot_extra_abi0.cpp"], "plain": [src / name for name in plain]}


@dataclass(frozen=True)
class TorchInfo:
    include_dirs: tuple[str, ...]
    lib_dir: str
    cxx11_abi: int
    version: str


@functools.lru_cache(maxsize=None)
def torch_info() -> TorchInfo:
    """Torch's headers, library folder and C++ ABI flag.

    Torch-facing code must be compiled with torch's ABI flag (1 for the 2.14 wheels), never with MindSpore's (0):
    a mismatch links lazily and then kills the process the first time a std::string crosses into libtorch.
    """
    import torch
    from torch.utils import cpp_extension

    return TorchInfo(
        include_dirs=tuple(cpp_extension.include_paths()),
        lib_dir=cpp_extension.library_paths()[0],
        cxx11_abi=int(torch.compiled_with_cxx11_abi()),
        version=torch.__version__,
    )


def cxx() -> str:
    return os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or "c++"


def cc() -> str:
    """The C compiler for `.c` sources."""
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc") or "cc"


def ninja_binary() -> str:
    """ninja from PATH, or the one the `ninja` wheel installed next to this interpreter (not on PATH when the
    virtual environment is not activated)."""
    found = shutil.which("ninja")
    if found:
        return found
    try:
        import ninja  # the PyPI package

        candidate = Path(ninja.BIN_DIR) / "ninja"
        if candidate.is_file():
            return str(candidate)
    except ImportError:
        pass
    candidate = Path(sys.executable).parent / "ninja"
    if candidate.is_file():
        return str(candidate)
    raise FileNotFoundError("ninja not found: install it with `pip install ninja`")


@functools.lru_cache(maxsize=None)
def compiler_version(compiler: str) -> str:
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False).stdout
    except OSError:
        return "missing"
    return out.splitlines()[0] if out else "unknown"


# C++20: torch 2.14's headers use it (std::strong_ordering, requires-clauses); MindSpore's headers build with it too
COMMON_CFLAGS = ("-std=c++20", "-fPIC", "-O2", "-Wno-unused-parameter")
C_CFLAGS = ("-std=c11", "-fPIC", "-O2")


def torch_cflags() -> list[str]:
    info = torch_info()
    flags = [*COMMON_CFLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={info.cxx11_abi}", f"-I{ms_ext_include_dir()}"]
    for inc in info.include_dirs:
        # -isystem: torch's own headers warn under -Wall; those warnings are not the user's.
        flags.append(f"-isystem{inc}")
    return flags


def plain_cflags() -> list[str]:
    """Flags for sources that do not use torch (ms_ext's C runtime, or a user's plain C++ kernel)."""
    return [*COMMON_CFLAGS, f"-I{ms_ext_include_dir()}"]


def abi0_cflags() -> list[str]:
    return [*COMMON_CFLAGS, "-D_GLIBCXX_USE_CXX11_ABI=0", f"-I{ms_ext_include_dir()}"]


@functools.lru_cache(maxsize=None)
def shared_cxx_runtime_flags(compiler: str) -> tuple[str, ...]:
    """Links the shared C++ runtime even where the toolchain has only its static archive for linking.

    A g++ whose `libstdc++.so` development link is missing (seen on an Ubuntu 24.04 CUDA image) silently links
    libstdc++.a into the library: a second, never-initialised copy of the C++ runtime beside the one torch loads,
    and the first error message formatted with an ostringstream crashes the process. Naming the runtime's shared
    object (`-l:libstdc++.so.6`, resolved before g++'s own `-lstdc++`) leaves nothing for the archive to supply."""
    try:
        found = subprocess.run([compiler, "-print-file-name=libstdc++.so"], capture_output=True, text=True,
                               check=False).stdout.strip()
    except OSError:
        return ()
    return () if os.path.isabs(found) and Path(found).exists() else ("-l:libstdc++.so.6",)


def link_flags(use_torch: bool, torch_runpath: Sequence[str] | None = None) -> list[str]:
    """`-z now` and `--no-undefined` turn a missing symbol into a link error instead of a crash mid-training.

    The RUNPATH lets MindSpore dlopen the library without `import torch` and without LD_LIBRARY_PATH: by default
    the absolute torch `lib/` of this environment (libraries in the user's cache, rebuilt for another torch);
    libraries that are installed elsewhere than where they are built pass `torch_runpath`, entries relative to
    the library (`$ORIGIN/../../torch/lib`)."""
    flags = ["-shared", "-Wl,-z,now", "-Wl,--no-undefined", *shared_cxx_runtime_flags(cxx())]
    if use_torch:
        lib = torch_info().lib_dir
        runpath = [lib] if torch_runpath is None else list(torch_runpath)
        flags += [f"-L{lib}", *(f"-Wl,-rpath,{entry}" for entry in runpath), "-lc10", "-ltorch_cpu", "-ltorch"]
    return flags
