"""Builds the bundled kernel libraries into aot_ops/lib with the same builder users get.

    pip install --no-build-isolation -e .

--no-build-isolation matters: an isolated build environment would download the newest torch (with several GB of
CUDA packages) instead of using the pinned torch 2.13 already installed.
"""
import os
import shutil
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


class AotLibrary(Extension):
    """A shared library of aot entry points (not a Python extension module)."""

    def __init__(self, name: str, sources: list[Path], include_dirs: list[Path] = (), cflags: list[str] = ()):
        super().__init__(name, sources=[])
        self.aot_sources = sources
        self.aot_include_dirs = list(include_dirs)
        self.aot_cflags = list(cflags)


class BuildAotLibraries(build_ext):
    def get_ext_filename(self, fullname: str) -> str:
        # aot_ops.lib.libaot_ops_cpu -> aot_ops/lib/libaot_ops_cpu.so (no Python ABI suffix: MindSpore loads it).
        return str(Path(*fullname.split("."))) + ".so"

    def run(self):
        if not self.inplace:
            # An installed wheel carries ms_ext's headers and runtime, so `python -m aot_ops build` works there too.
            target = Path(self.build_lib) / "aot_ops" / "_ms_ext"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(HERE / "ms_ext", target)
        # Editable installs build in a temporary folder, then copy the library into the source tree's
        # aot_ops/lib, which setuptools does not create.
        (HERE / "aot_ops" / "lib").mkdir(exist_ok=True)
        super().run()

    def build_extension(self, ext: AotLibrary):
        sys.path.insert(0, str(HERE))
        from aot_ops._build import builder

        output = Path(self.get_ext_fullpath(ext.name)).resolve()
        # A persistent build folder keeps ninja's incremental state between installs.
        build_dir = HERE / "build" / "aot_libraries" / output.stem
        spec = builder.LibrarySpec(name=output.stem, sources=[HERE / s for s in ext.aot_sources],
                                   extra_include_paths=[HERE / p for p in ext.aot_include_dirs],
                                   extra_cflags=ext.aot_cflags)
        builder.build_library(spec, build_dir, output, verbose=self.verbose > 1)


def cpu_kernel_sources() -> list[Path]:
    """The operator kernels (kernels/aten/cpu) and the generic entry for any ATen operator (kernels/aten/generic)."""
    folders = (HERE / "kernels" / "aten" / "cpu", HERE / "kernels" / "aten" / "generic")
    return sorted(p.relative_to(HERE) for folder in folders for p in folder.glob("*.cpp"))


ASCENDC = Path("kernels") / "ascendc"


def ascendc_sources() -> list[Path]:
    """The Ascend C kernels (compiled by g++ against the emulator's kernel_operator.h), their emulator launches and
    the aot/torch entry points."""
    folders = ("kernels", "host_cpu", "aot")
    return sorted(p.relative_to(HERE) for f in folders for p in (HERE / ASCENDC / f).glob("*.cpp"))


def ascendc_include_dirs() -> list[Path]:
    return [ASCENDC / d for d in ("emulator", "tiling", "host_cpu", "aot")]


def cuda_library() -> list[AotLibrary]:
    """The CUDA builds of the bundled kernels plus add2 (kernels/cuda), only where they can be linked: a CUDA build
    of torch, nvcc and TORCH_CUDA_ARCH_LIST. The same kernel sources as the CPU library, with CUDA placement."""
    sys.path.insert(0, str(HERE))
    from aot_ops._build import cuda

    if cuda.nvcc() is None or cuda.why_not_linkable(use_torch=True) or not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return []
    sources = cpu_kernel_sources() + sorted(p.relative_to(HERE) for p in (HERE / "kernels" / "cuda").glob("*.cu"))
    return [AotLibrary("aot_ops.lib.libaot_ops_cuda", sources, [Path("kernels") / "cuda"], cuda.host_cflags())]


setup(
    ext_modules=[AotLibrary("aot_ops.lib.libaot_ops_cpu", cpu_kernel_sources()),
                 AotLibrary("aot_ops.lib.libaot_ops_ascendc", ascendc_sources(), ascendc_include_dirs()),
                 *cuda_library()],
    cmdclass={"build_ext": BuildAotLibraries},
)
