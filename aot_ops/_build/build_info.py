"""What a bundled library was built against: written beside it at build time, checked before it is used.

A library compiled against one torch calls into that torch's C++ ABI; next to another torch it fails to resolve
symbols at dlopen or, worse, misreads torch's structures. ms_ext's AotExtra mirror (ms_ext/src/aot_extra_abi0.cpp)
follows one MindSpore release's class layout. So the versions are recorded in `<library>.build.json` and a
mismatch with what is installed is an error that says to rebuild, raised before MindSpore loads the library.

Libraries built by `aot_ops.load` need no record: their cache key contains the torch version, so another torch
builds another library.
"""
from __future__ import annotations

import functools
import json
from importlib import metadata
from pathlib import Path

from . import toolchain
from ..errors import Error

RECORD_SUFFIX = ".build.json"

PACKAGE_REBUILD = ("rebuild the package that ships it against the installed versions "
                   "(`pip install --no-build-isolation --force-reinstall <its sdist or source folder>`)")
REBUILD = ("rebuild aot_ops against the installed versions (in a checkout: `pip install --no-build-isolation -e .`; "
           "from an sdist: `pip install --no-build-isolation --force-reinstall aot_ops-<version>.tar.gz`)")


class StaleLibraryError(Error, RuntimeError):
    """A bundled library was built against other torch or MindSpore versions than the installed ones."""


def record_path(library: Path) -> Path:
    return Path(library).with_name(Path(library).name + RECORD_SUFFIX)


def built_against(use_torch: bool = True) -> dict[str, str]:
    """The facts a library built now depends on."""
    facts = {"mindspore": toolchain.MINDSPORE_CONTRACT}
    if use_torch:
        facts["torch"] = _release(toolchain.torch_info().version)
    return facts


def write(library: Path, use_torch: bool = True) -> Path:
    path = record_path(library)
    path.write_text(json.dumps(built_against(use_torch), indent=1) + "\n")
    return path


def read(library: Path) -> dict[str, str] | None:
    try:
        return json.loads(record_path(library).read_text())
    except (OSError, ValueError):
        return None


def _release(version: str) -> str:
    """'2.13.0+cpu' -> '2.13.0': the local label names the wheel's accelerator build, not its C++ ABI."""
    return version.split("+", 1)[0]


@functools.lru_cache(maxsize=None)  # the installed versions do not change under a running process
def _installed(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def mismatch(library: Path) -> str | None:
    """Why `library` must not be used with what is installed, or None."""
    recorded = read(library)
    if recorded is None:
        return (f"{library} has no build record ({record_path(library).name}): it was not built by aot_ops (or by "
                "an older one)")
    problems = []
    torch_version = _installed("torch")
    if "torch" in recorded and torch_version is not None and _release(torch_version) != recorded["torch"]:
        problems.append(f"torch {recorded['torch']} (installed: {torch_version})")
    mindspore_version = _installed("mindspore")
    if mindspore_version is not None and not (mindspore_version + ".").startswith(recorded.get("mindspore", "") + "."):
        problems.append(f"MindSpore {recorded.get('mindspore')} (installed: {mindspore_version})")
    if problems:
        return f"{library} was built against {' and '.join(problems)}"
    return None


def check(library: Path, rebuild_hint: str = REBUILD) -> None:
    """Raise StaleLibraryError when `library` does not match the installed torch and MindSpore."""
    why = mismatch(Path(library))
    if why:
        raise StaleLibraryError(f"{why}; {rebuild_hint}")


def check_library(library: str | Path) -> Path:
    """`library` (resolved) if it was built against the installed torch and MindSpore; StaleLibraryError saying to
    rebuild otherwise. A package that ships a kernel library (aot_ops.extension) calls it before handing the
    library to MindSpore."""
    path = Path(library).resolve()
    check(path, PACKAGE_REBUILD)
    return path
