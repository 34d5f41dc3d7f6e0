"""Builds the bundled kernel libraries into aot_ops/lib with the same builder users get (aot_ops.extension).

    pip install --no-build-isolation -e .     # a checkout (what ./run.sh does)
    python -m build                           # an sdist and a wheel built from it

--no-build-isolation matters for the editable install: an isolated build environment would install another copy
of torch to compile against instead of using the pinned torch 2.14 already installed.
"""
import os
import shutil
import sys
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from aot_ops._front import build as front_build  # noqa: E402
from aot_ops.extension import AotExtension, BuildAotExtension  # noqa: E402

# Run-time sources an installed aot_ops needs: ms_ext (compiled into every library aot_ops.load builds) and the
# kernels compiled on the user's machine (CUDA add2, the Ascend C NPU project). A checkout uses the top-level
# folders; a wheel carries them as aot_ops/_ms_ext and aot_ops/_kernels (aot_ops._native.paths.source_dir).
SHIPPED_SOURCES = ("ms_ext", "kernels")


class BuildBundledLibraries(BuildAotExtension):
    def finalize_options(self):
        super().finalize_options()
        # The libraries are independent: all are built at once (each ninja runs a compiler per core as well), so
        # the front's one long unit does not leave the other cores idle at the end. `-j` on the command line wins.
        if not self.parallel:
            self.parallel = len(self.distribution.ext_modules)

    def run(self):
        if not (self.inplace or self.editable_mode):  # an editable install uses the checkout's folders
            for name in SHIPPED_SOURCES:
                target = Path(self.build_lib) / "aot_ops" / f"_{name}"
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(HERE / name, target, ignore=shutil.ignore_patterns("__pycache__", "*.o", "*.so"))
        self.runtime_objects = self.build_ms_ext_runtime()
        super().run()

    def build_ms_ext_runtime(self) -> list[Path]:
        """ms_ext's runtime units, compiled once: the bundled libraries link them, and they are installed in
        aot_ops/lib/ms_ext_runtime for the libraries users build later (aot_ops/_build/runtime.py)."""
        from aot_ops._build import builder, runtime

        in_source_tree = bool(self.inplace or self.editable_mode)
        build_dir = Path("build" if in_source_tree else self.build_temp) / "ms_ext_runtime"
        spec = builder.LibrarySpec(name="ms_ext_runtime", sources=[], use_torch=False, runtime_objects=())
        objects = builder.build_objects(spec, build_dir.resolve(), verbose=self.verbose > 1)
        # the checkout's aot_ops/lib/ms_ext_runtime, or the same place under build_lib (the wheel's contents)
        folder = runtime.RUNTIME_DIR if in_source_tree else Path(self.build_lib) / runtime.RUNTIME_DIR.relative_to(HERE)
        return runtime.install(objects, folder)

    def build_extension(self, ext):
        if not isinstance(ext, front_build.FrontExtension):
            return super().build_extension(ext)
        build_dir = Path("build" if self.final_in_source_tree else self.build_temp) / "aot_front"
        front_build.build(Path(self.get_ext_fullpath(ext.name)).resolve(), build_dir.resolve(),
                          in_place=bool(self.inplace or self.editable_mode))


def cpu_kernel_sources() -> list[Path]:
    """The operator kernels (kernels/aten/cpu) and the generic entry for any ATen operator (kernels/aten/generic),
    compiled as one unit."""
    from aot_ops._build import bundled

    return bundled.aten_kernel_units(HERE / "kernels", HERE / "build" / "generated")


ASCENDC = Path("kernels") / "ascendc"


def ascendc_sources() -> list[Path]:
    """The Ascend C kernels (compiled by g++ against the emulator's kernel_operator.h), the emulator settings and
    path counts (kernels/ascendc/aot), and the launches and entry points generated from the kernels' declarations
    (aot_ops/ascendc/_bundled.py) by the code generator users' kernels go through (aot_ops.ascendc.load)."""
    from aot_ops._build.bundled import write_generated_source
    from aot_ops.ascendc import _bundled as bundled

    generated = write_generated_source(Path("build") / "generated" / "ascendc_bundled_entries.cpp",
                                       bundled.library_source())
    kernels = [p.relative_to(HERE) for p in bundled.kernel_sources(HERE / ASCENDC / "kernels")]
    runtime = sorted(p.relative_to(HERE) for p in (HERE / ASCENDC / "aot").glob("*.cpp"))
    return kernels + runtime + [generated]


def ascendc_include_dirs() -> list[Path]:
    return [ASCENDC / d for d in ("emulator", "aot")]


def cuda_library() -> list[AotExtension]:
    """The CUDA builds of the bundled kernels plus add2 (kernels/cuda), only where they can be linked: a CUDA build
    of torch, nvcc and TORCH_CUDA_ARCH_LIST. The same kernel sources as the CPU library, with CUDA placement."""
    from aot_ops._build import cuda

    if cuda.nvcc() is None or cuda.why_not_linkable(use_torch=True) or not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        return []
    own = [p for p in (HERE / "kernels" / "cuda").iterdir() if p.suffix in (".cu", ".cpp")]
    sources = cpu_kernel_sources() + sorted(p.relative_to(HERE) for p in own)
    return [AotExtension("aot_ops.lib.libaot_ops_cuda", sources, [Path("kernels") / "cuda"], cuda.host_cflags())]


def npu_library() -> list[AotExtension]:
    """The bundled ATen kernels with NPU placement (ms_ext's MindSpore buffers as torch_npu tensors on MindSpore's
    aclrtStream), only where torch_npu and the CANN toolkit are installed: the same sources as the CPU library."""
    from aot_ops._build import npu

    if npu.why_not_buildable():
        return []
    return [AotExtension("aot_ops.lib.libaot_ops_npu", cpu_kernel_sources(), device="npu")]


os.chdir(HERE)  # the source lists above are relative to the project
setup(
    ext_modules=[AotExtension("aot_ops.lib.libaot_ops_cpu", cpu_kernel_sources()),
                 AotExtension("aot_ops.lib.libaot_ops_ascendc", ascendc_sources(), ascendc_include_dirs()),
                 *cuda_library(), *npu_library(),
                 front_build.FrontExtension()],  # the PyNative fast front (aot_ops/_front)
    cmdclass={"build_ext": BuildBundledLibraries},
)
