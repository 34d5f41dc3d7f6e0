"""The one way aot_ops opens a kernel library from Python.

Every ctypes handle (reading a kernel's signature, the last error, launch counts, the harness, the Ascend C
runtime) comes from `open_library`, which
- honours MindSpore's MS_CUSTOM_AOT_WHITE_LIST before anything is loaded: MindSpore refuses a library outside that
  folder, and aot_ops must not dlopen it either (loading a library runs its constructors);
- keeps one handle per library (dlopen of a path MindSpore loads too returns the same copy, so aot_ops reads
  MindSpore's copy of the state);
- declares the prototypes of the C functions libraries export, once.
"""
from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path

WHITE_LIST_ENV = "MS_CUSTOM_AOT_WHITE_LIST"

_c_char_p, _c_int, _c_int64, _c_void_p = ctypes.c_char_p, ctypes.c_int, ctypes.c_int64, ctypes.c_void_p

# name: (restype, argtypes); declared for every library that exports the name.
_PROTOTYPES = {
    # ms_ext's C runtime (ms_ext/c_api.h), in every library built with ms_ext
    "ms_ext_last_error": (_c_char_p, []),
    "ms_ext_last_error_any_thread": (_c_char_p, []),
    "ms_ext_live_kernel_states": (_c_int64, []),
    "ms_ext_guarded_call": (_c_int, None),
    "ms_ext_call_extra_new": (_c_void_p, [_c_char_p, ctypes.c_size_t]),
    "ms_ext_call_extra_free": (None, [_c_void_p]),
    "ms_ext_call_extra_workspace": (ctypes.c_size_t, [_c_void_p, _c_void_p, ctypes.c_size_t]),
    # the generic ATen entry (kernels/aten/generic/aten_op.cpp)
    "aot_ops_aten_launches": (_c_int64, [_c_int]),
    "aot_ops_aten_refusal": (_c_char_p, [_c_char_p, _c_int]),
    "aot_ops_aten_call_refusal": (_c_char_p, [_c_char_p, _c_char_p, _c_int, ctypes.POINTER(_c_int)]),
    # the program entry (kernels/aten/generic/program.cpp)
    "aot_ops_program_launches": (_c_int64, []),
    "aot_ops_program_nanoseconds": (_c_int64, []),
    "aot_ops_program_hold": (_c_int64, [_c_char_p]),
    "aot_ops_program_release": (_c_int64, [_c_char_p]),
    "aot_ops_programs_held": (_c_int64, []),
    "aot_ops_programs_alive": (_c_int64, []),
    "aot_ops_program_entries": (_c_int64, []),
    "aot_ops_program_parses": (_c_int64, []),
    # the Ascend C runtime (kernels/ascendc/aot)
    "ascendc_path_count": (_c_int64, [_c_char_p, _c_char_p]),
    "ascendc_emulator_configure": (_c_int, [_c_char_p, _c_int64]),
    "ascendc_emulator_order": (_c_char_p, []),
    "ascendc_emulator_ub_bytes": (_c_int64, []),
}


def inside_white_list(path: str | os.PathLike) -> bool:
    """Whether MindSpore's MS_CUSTOM_AOT_WHITE_LIST (when set) allows `path` (real paths compared)."""
    allowed = os.environ.get(WHITE_LIST_ENV)
    if allowed is None:
        return True
    path, folder = os.path.realpath(path), os.path.realpath(allowed)
    return os.path.commonpath([path, folder]) == folder


def check_white_list(library: str | os.PathLike) -> None:
    """Refuses a library outside MS_CUSTOM_AOT_WHITE_LIST, as MindSpore's Custom does."""
    if not inside_white_list(library):
        path, folder = os.path.realpath(library), os.path.realpath(os.environ[WHITE_LIST_ENV])
        raise PermissionError(f"{path} is outside {WHITE_LIST_ENV}={folder}: MindSpore refuses to load it, and aot_ops "
                              f"does not load it either; put the library under {folder} or widen the white list")


def open_library(library: str | os.PathLike) -> ctypes.CDLL:
    """The ctypes handle of a kernel library (white list checked on every call)."""
    path = os.path.realpath(library)
    check_white_list(path)
    return _open(path)


@functools.lru_cache(maxsize=None)
def _open(path: str) -> ctypes.CDLL:
    if not Path(path).is_file():
        raise FileNotFoundError(f"no library at {path}")
    lib = ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    for name, (restype, argtypes) in _PROTOTYPES.items():
        function = getattr(lib, name, None)
        if function is not None:
            function.restype = restype
            if argtypes is not None:
                function.argtypes = argtypes
    return lib


# What a bundled library's NEEDED entries ask of torch (libc10's own dependencies are found by its RUNPATH).
TORCH_LIBRARIES = ("libc10.so", "libtorch_cpu.so", "libtorch.so")


@functools.lru_cache(maxsize=None)
def preload_torch_libraries() -> None:
    """Loads torch's libraries a bundled library needs, found where Python finds torch, without importing torch.

    An installed library finds torch through RUNPATH `$ORIGIN/../../torch/lib`, true only when torch sits in the
    same site-packages. With torch elsewhere (`pip install --user`, `--system-site-packages`, a .pth), MindSpore's
    dlopen of the library failed with `libc10.so: cannot open shared object file`. The dynamic loader satisfies a
    NEEDED entry with an already loaded library of that soname, so loading them first makes any path work."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return  # no torch: the library's own RUNPATH is all there is
    lib_dir = Path(next(iter(spec.submodule_search_locations))) / "lib"
    for name in TORCH_LIBRARIES:
        if (lib_dir / name).is_file():
            ctypes.CDLL(str(lib_dir / name), mode=os.RTLD_NOW | os.RTLD_LOCAL)


def last_error(lib: ctypes.CDLL) -> str:
    return lib.ms_ext_last_error().decode("utf-8", errors="replace")
