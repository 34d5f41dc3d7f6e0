"""Build Ascend C kernels for a real NPU (CANN): python -m aot_ops.ascendc.npu [--soc Ascend910B1] [--project DIR].

Off unless CANN is present: without ASCEND_HOME_PATH (or without CANN's ascendc.cmake under it) this refuses to
start with CannNotFoundError, rather than building half of it. On an NPU machine it configures and builds, with
CMake, the CANN project generated from the kernels' declarations (the bundled kernels', aot_ops/ascendc/_bundled.py,
or with --project a library's `lib.npu_project`) and prints the path of the library of host launches
(`lib<name>_npu.so`: `<kernel>_launch(stream, buffers, shapes, ndims, block_dim, ub_bytes, attrs)`, 1 when the tiling
refuses the shapes and the caller runs the fallback).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from ..errors import Error

ASCENDC_CMAKE = ("compiler/tikcpp/ascendc_kernel_cmake/ascendc.cmake", "tools/tikcpp/ascendc_kernel_cmake/ascendc.cmake")


def npu_project() -> Path:
    """The CANN project of the bundled kernels (bundled.npu_project: generated from their declarations)."""
    from ._bundled import npu_project as bundled_project

    return bundled_project()


class CannNotFoundError(Error, RuntimeError):
    """The NPU build was asked for on a machine without CANN."""


def cann_home() -> Path:
    """CANN's toolkit folder from ASCEND_HOME_PATH, checked to hold ascendc.cmake."""
    home = os.environ.get("ASCEND_HOME_PATH")
    if not home:
        raise CannNotFoundError(
            "CANN not found: ASCEND_HOME_PATH is not set. The NPU build of the Ascend C kernels needs the CANN "
            "toolkit (source <cann>/set_env.sh). Without an NPU, the CPU emulator build (setup.py) is the one to use.")
    if not any((Path(home) / rel).is_file() for rel in ASCENDC_CMAKE):
        raise CannNotFoundError(f"CANN not found: no ascendc.cmake under ASCEND_HOME_PATH={home}")
    return Path(home)


def build(build_dir: Path, soc_version: str = "Ascend910B1", project: Path | None = None) -> Path:
    """Configures and builds `project` (default: the bundled kernels', npu_project()); returns its lib<name>_npu.so."""
    home = cann_home()
    defines = [f"-DASCEND_HOME_PATH={home}", f"-DSOC_VERSION={soc_version}"]
    return _cmake(Path(project) if project is not None else npu_project(), build_dir, defines, "lib*_npu.so")


def _cmake(project: Path, build_dir: Path, defines: list[str], product: str) -> Path:
    subprocess.run(["cmake", "-S", str(project), "-B", str(build_dir), *defines], check=True)
    subprocess.run(["cmake", "--build", str(build_dir), "-j"], check=True)
    found = sorted(Path(build_dir).glob(product))
    if not found:
        raise RuntimeError(f"the build finished without producing {product} in {build_dir}")
    return found[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aot_ops.ascendc.npu", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--soc", default="Ascend910B1", help="SOC_VERSION (npu-smi info shows the chip)")
    parser.add_argument("--build-dir", default="build/ascendc_npu")
    parser.add_argument("--project", help="the NPU project of a library made by aot_ops.ascendc.load "
                                          "(lib.npu_project); default: the bundled kernels")
    args = parser.parse_args(argv)
    try:
        print(build(Path(args.build_dir), args.soc, Path(args.project) if args.project else None))
    except CannNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
