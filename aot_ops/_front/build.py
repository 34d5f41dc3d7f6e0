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


def link_flags(flags: list[str], mindspore_lib: str | None) -> list[str]:
    """CustomOpBuilder's link line with a RUNPATH that can be searched, and nothing else.

    MindSpore 2.10 ends one flag with a bare `--rpath`, so the linker takes the next library argument as the path
    and the front carried RPATH `--library=mindspore_core`, searched from the caller's working directory. That flag
    is dropped. Its `--disable-new-dtags` (RPATH, which outranks LD_LIBRARY_PATH and is inherited by what the
    library loads) becomes RUNPATH. The folders named: MindSpore's lib beside an installed front, and
    `mindspore_lib`, the build environment's, only for a front that stays where it was built (an editable install):
    a wheel's build environment is a temporary folder that anyone could recreate."""
    kept = []
    for flag in flags:
        if flag.endswith(("--rpath", "-rpath")):
            flag = flag.rsplit(",", 1)[0]  # the dangling option goes, the options before it in the -Wl list stay
            if flag == "-Wl":
                continue
        flag = flag.replace("--disable-new-dtags", "--enable-new-dtags")
        kept.append(flag)
    # CustomOpBuilder writes the flags into a ninja file as they are, run by a shell: `$$` is ninja's `$`, and the
    # single quotes keep the shell from expanding $ORIGIN.
    folders = [MINDSPORE_LIB_FROM_FRONT] + ([mindspore_lib] if mindspore_lib else [])
    runpath = ":".join(folders).replace("$", "$$")
    return [*kept, "-Wl,--enable-new-dtags", f"'-Wl,-rpath,{runpath}'"]


def build(output: Path, build_dir: Path, in_place: bool) -> None:
    """Compile the front into `output`. `in_place`: the front stays where it is built (an editable install), so
    it may also search the build environment's MindSpore. Raises when MindSpore is missing or the compile fails."""
    import mindspore
    from mindspore import ops

    here = str(Path(mindspore.__file__).resolve().parent / "lib") if in_place else None

    class Builder(ops.CustomOpBuilder):
        def get_ldflags(self):
            return link_flags(super().get_ldflags(), here)

    build_dir.mkdir(parents=True, exist_ok=True)
    builder = Builder(MODULE, [str(SOURCE)], backend="CPU", build_dir=str(build_dir))
    built = Path(builder.build())
    output.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(built, output)
    log.info("built the PyNative front: %s", output)
