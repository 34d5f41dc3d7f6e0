"""Building the PyNative front (pynative_front.cpp) when the package is installed (setup.py), with MindSpore's own
CustomOpBuilder: its include paths, its flags (the old C++ ABI MindSpore is built with) and its link line to
MindSpore's PyNative libraries, for the MindSpore and Python of the build environment. About 40 s.
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

from setuptools import Extension

MODULE = "_pynative_front"
SOURCE = Path(__file__).resolve().parent / "pynative_front.cpp"
log = logging.getLogger(__name__)


class FrontExtension(Extension):
    """The front as a Python extension module of the package (aot_ops._front._pynative_front)."""

    def __init__(self):
        super().__init__(f"aot_ops._front.{MODULE}", sources=[])  # compiled by CustomOpBuilder, not setuptools


# Where MindSpore's libraries are, seen from the installed front (site-packages/aot_ops/_front/).
MINDSPORE_LIB_FROM_FRONT = "$ORIGIN/../../mindspore/lib"


def link_flags(flags: list[str], mindspore_lib: str) -> list[str]:
    """CustomOpBuilder's link line with a RUNPATH that can be searched.

    MindSpore 2.10 ends one flag with a bare `--rpath`, so the linker takes the next library argument as the path
    and the front carried RPATH `--library=mindspore_core`, searched from the caller's working directory. That flag
    is dropped and the real folders are named: MindSpore's lib beside an installed front, and the build
    environment's (an editable install)."""
    kept = []
    for flag in flags:
        if flag.endswith(("--rpath", "-rpath")):
            flag = flag.rsplit(",", 1)[0]  # the dangling option goes, the options before it in the -Wl list stay
            if flag == "-Wl":
                continue
        kept.append(flag)
    # CustomOpBuilder writes the flags into a ninja file as they are, run by a shell: `$$` is ninja's `$`, and the
    # single quotes keep the shell from expanding $ORIGIN.
    runpath = f"{MINDSPORE_LIB_FROM_FRONT}:{mindspore_lib}".replace("$", "$$")
    return [*kept, f"'-Wl,-rpath,{runpath}'"]


def build(output: Path, build_dir: Path) -> None:
    """Compile the front into `output`. Raises when MindSpore is missing or the compile fails."""
    import mindspore
    from mindspore import ops

    class Builder(ops.CustomOpBuilder):
        def get_ldflags(self):
            return link_flags(super().get_ldflags(), str(Path(mindspore.__file__).resolve().parent / "lib"))

    build_dir.mkdir(parents=True, exist_ok=True)
    builder = Builder(MODULE, [str(SOURCE)], backend="CPU", build_dir=str(build_dir))
    built = Path(builder.build())
    output.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(built, output)
    log.info("built the PyNative front: %s", output)
