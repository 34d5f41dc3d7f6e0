"""Where torch_npu and CANN are, and the flags of a library whose ms_ext entry points run on an Ascend NPU.

With -DMS_EXT_TARGET_NPU, ms_ext views MindSpore's buffers as tensors of torch's PrivateUse1 device (torch_npu's
"npu") and makes MindSpore's aclrtStream the current stream of the call (ms_ext/detail/npu_placement.h); the ATen
calls then dispatch to torch_npu's kernels. Compiling needs torch_npu's headers only (the wheel ships them, with
ACL's); linking and running need the CANN runtime (libascendcl and friends), which comes with an Ascend machine's
toolkit, not with any wheel. Nothing here imports torch_npu: importing it needs the CANN runtime.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import Error

# The folders CANN's set_env.sh exports, then the default installation.
_CANN_VARIABLES = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
_CANN_DEFAULT = Path("/usr/local/Ascend/ascend-toolkit/latest")
# The ms_ext source answering the placement's runtime questions through torch_npu and ACL (npu_runtime.h).
RUNTIME_SOURCE = "npu_runtime.cpp"


class NpuSetupError(Error, RuntimeError):
    """A library with NPU placement cannot be built here (no torch_npu, or no CANN runtime to link against)."""


def find_torch_npu() -> Path | None:
    """The torch_npu package folder (holding include/ and lib/), found without importing it; $AOT_OPS_TORCH_NPU
    names another one (an unpacked wheel)."""
    override = os.environ.get("AOT_OPS_TORCH_NPU")
    candidates = [Path(override)] if override else []
    if not override:
        spec = importlib.util.find_spec("torch_npu")
        if spec is not None and spec.origin:
            candidates.append(Path(spec.origin).parent)
    for folder in candidates:
        if (folder / "include" / "torch_npu").is_dir() and (folder / "lib" / "libtorch_npu.so").is_file():
            return folder
    return None


def find_cann() -> Path | None:
    """The CANN toolkit whose runtime (lib64/libascendcl.so) a library links: $ASCEND_HOME_PATH,
    $ASCEND_TOOLKIT_HOME, else the default installation."""
    candidates = [Path(os.environ[v]) for v in _CANN_VARIABLES if os.environ.get(v)] + [_CANN_DEFAULT]
    for home in candidates:
        if (home / "lib64" / "libascendcl.so").is_file():
            return home
    return None


def why_not_buildable() -> str | None:
    """Why a library with NPU placement cannot be built and linked here, or None."""
    if find_torch_npu() is None:
        return ("torch_npu is not installed (pip install torch-npu==<torch's minor release>.0, 2.14.0 for torch 2.14.1; "
                "its wheel ships the headers and libtorch_npu.so)")
    if find_cann() is None:
        return ("the CANN toolkit is not found (no lib64/libascendcl.so under ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME "
                f"or {_CANN_DEFAULT}): source <cann>/set_env.sh on the Ascend machine")
    return None


@dataclass(frozen=True)
class NpuToolchain:
    """What a library with NPU placement is compiled and linked against. `cann_home` None: compile and link against
    torch_npu alone, leaving CANN's symbols undefined (a check on a machine without CANN; such a library cannot
    load)."""

    torch_npu: Path
    cann_home: Path | None = None

    def cflags(self) -> list[str]:
        """For every C++ unit: NPU placement, torch_npu's headers and the ACL headers its wheel ships."""
        include = self.torch_npu / "include"
        flags = ["-DMS_EXT_TARGET_NPU", f"-I{include}", f"-I{include / 'third_party' / 'acl' / 'inc'}"]
        if self.cann_home is not None:
            flags.append(f"-I{self.cann_home / 'include'}")
        return flags

    def ldflags(self, torch_npu_runpath: list[str] | None = None) -> list[str]:
        """libtorch_npu (the placement's stream and the NPU kernels) and CANN's libascendcl. `torch_npu_runpath`
        None: found at run time where they were at build time (a library in the build cache); else torch_npu's
        lib/ relative to the installed library, and CANN's runtime where the toolkit's set_env.sh puts it on
        LD_LIBRARY_PATH (an installed library carries no absolute search path)."""
        lib = self.torch_npu / "lib"
        runpath = [str(lib)] if torch_npu_runpath is None else list(torch_npu_runpath)
        flags = [f"-L{lib}", *(f"-Wl,-rpath,{entry}" for entry in runpath), "-ltorch_npu"]
        if self.cann_home is not None:
            cann_lib = self.cann_home / "lib64"
            flags += [f"-L{cann_lib}", "-lascendcl"]
            if torch_npu_runpath is None:
                flags.append(f"-Wl,-rpath,{cann_lib}")
        else:
            # libtorch_npu's own CANN dependencies are absent; the symbols it and ms_ext take from CANN stay
            # undefined, reported as warnings, and the library is a link check, never loaded.
            flags += ["-Wl,--warn-unresolved-symbols", "-Wl,--allow-shlib-undefined"]
        return flags


def toolchain() -> NpuToolchain:
    """torch_npu and CANN as found here; NpuSetupError saying what is missing."""
    why = why_not_buildable()
    if why is not None:
        raise NpuSetupError(f"a library with NPU placement cannot be built here: {why}")
    return NpuToolchain(find_torch_npu(), find_cann())
