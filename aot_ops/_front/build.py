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


def build(output: Path, build_dir: Path) -> None:
    """Compile the front into `output`. Raises when MindSpore is missing or the compile fails."""
    from mindspore import ops

    build_dir.mkdir(parents=True, exist_ok=True)
    builder = ops.CustomOpBuilder(MODULE, [str(SOURCE)], backend="CPU", build_dir=str(build_dir))
    built = Path(builder.build())
    output.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(built, output)
    log.info("built the PyNative front: %s", output)
