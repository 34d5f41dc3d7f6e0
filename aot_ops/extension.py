"""setuptools support for packages that ship aot kernel libraries, built by the builder `aot_ops.load` uses.

    # setup.py of your package (see examples/kernel_package)
    from setuptools import setup
    from aot_ops.extension import AotExtension, BuildAotExtension

    setup(name="my_kernels", packages=["my_kernels"],
          ext_modules=[AotExtension("my_kernels.libmy_kernels", ["csrc/my_op.cpp"])],
          cmdclass={"build_ext": BuildAotExtension})

`pip install --no-build-isolation .` then puts `my_kernels/libmy_kernels.so` in the package, beside a record of
the torch and MindSpore versions it was built against. Its RUNPATH points at torch's `lib/` relative to the
library (`$ORIGIN/../torch/lib` for a library one folder deep in site-packages), so MindSpore loads it from any
install location without `import torch` and without LD_LIBRARY_PATH. An editable install (`pip install -e .`)
points at the torch of the build environment, relative to the source tree.

Build isolation would install another torch into a throwaway environment to compile against: pass
`--no-build-isolation`, or list the exact torch you run in `[build-system] requires`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from setuptools import Extension
from setuptools.command.build_ext import build_ext


class AotExtension(Extension):
    """A shared library of aot entry points (not a Python extension module): `name` is its dotted place in the
    package (`my_kernels.lib.libmy_kernels` -> my_kernels/lib/libmy_kernels.so).

    `use_torch=False` for a plain C/C++ kernel that neither includes nor links torch. `device="npu"`: its ms_ext
    entry points run on an Ascend NPU through torch_npu (ms_ext's NPU placement; needs torch_npu and CANN).
    """

    def __init__(self, name: str, sources: Sequence[str | Path], include_dirs: Sequence[str | Path] = (),
                 extra_cflags: Sequence[str] = (), extra_ldflags: Sequence[str] = (), use_torch: bool = True,
                 device: str = "cpu"):
        super().__init__(name, sources=[])  # setuptools must not compile these itself
        self.aot_sources = [Path(s) for s in sources]
        self.aot_include_dirs = [Path(p) for p in include_dirs]
        self.aot_cflags = list(extra_cflags)
        self.aot_ldflags = list(extra_ldflags)
        self.use_torch = use_torch
        if device not in ("cpu", "npu"):
            raise ValueError(f"AotExtension {name}: device must be 'cpu' or 'npu' (CUDA follows from .cu sources), "
                             f"got {device!r}")
        self.device = device


def installed_torch_runpath(library_name: str) -> list[str]:
    """RUNPATH entries, relative to the installed library, of torch's lib/ in the same site-packages."""
    depth = len(library_name.split(".")) - 1
    return ["$ORIGIN/" + "../" * depth + "torch/lib"]


class BuildAotExtension(build_ext):
    """`build_ext` for AotExtension: ninja builds with depfiles, a dlopen check, an atomic publish, and a build
    record next to each library (checked by `aot_ops.check_library`)."""

    def get_ext_filename(self, fullname: str) -> str:
        # No Python ABI suffix: MindSpore loads the library by the path the user gives it.
        return str(Path(*fullname.split("."))) + ".so"

    # ms_ext's runtime objects the libraries link (aot_ops' own setup.py compiles them first); None: those
    # installed with aot_ops (aot_ops._build.runtime)
    runtime_objects = None

    def run(self) -> None:
        # setuptools builds into build_lib with `inplace` switched off, then copies into the source tree; the
        # RUNPATH must be computed for where the library will finally live.
        self.final_in_source_tree = bool(self.inplace or self.editable_mode)
        super().run()

    def source_tree_location(self, ext: AotExtension) -> Path:
        """Where an editable install leaves the library (setuptools copies it there after the build)."""
        inplace_file, _ = self._get_inplace_equivalent(self.get_finalized_command("build_py"), ext)
        return Path(inplace_file).resolve()

    def build_extension(self, ext: Extension) -> None:
        if not isinstance(ext, AotExtension):
            return super().build_extension(ext)
        from ._build import build_info, builder, npu, toolchain

        output = Path(self.get_ext_fullpath(ext.name)).resolve()
        if self.final_in_source_tree:
            # An editable install: the library stays in the source tree and finds torch where it is now.
            torch_lib = toolchain.torch_info().lib_dir
            runpath = ["$ORIGIN/" + os.path.relpath(torch_lib, self.source_tree_location(ext).parent)]
        else:
            runpath = installed_torch_runpath(ext.name)
        spec = builder.LibrarySpec(
            name=output.stem, sources=[s.resolve() for s in ext.aot_sources], use_torch=ext.use_torch,
            extra_cflags=ext.aot_cflags, extra_ldflags=ext.aot_ldflags,
            extra_include_paths=[p.resolve() for p in ext.aot_include_dirs],
            torch_runpath=runpath if ext.use_torch else None,
            npu_toolchain=npu.toolchain() if getattr(ext, "device", "cpu") == "npu" else None,
            runtime_objects=self.runtime_objects)
        builder.build_library(spec, self.build_dir_for(ext), output, verbose=self.verbose > 1)
        build_info.write(output, use_torch=ext.use_torch)

    def copy_extensions_to_source(self) -> None:
        """The libraries and their build records, into a source tree whose library folder may not exist yet."""
        from ._build.build_info import record_path

        build_py = self.get_finalized_command("build_py")
        for ext in self.extensions:
            inplace_file, regular_file = self._get_inplace_equivalent(build_py, ext)
            Path(inplace_file).parent.mkdir(parents=True, exist_ok=True)
            self.copy_file(regular_file, inplace_file, level=self.verbose)
            if isinstance(ext, AotExtension):
                self.copy_file(str(record_path(Path(regular_file))), str(record_path(Path(inplace_file))),
                               level=self.verbose)

    def build_dir_for(self, ext: AotExtension) -> Path:
        """Where ninja keeps its objects and state. Editable installs keep one folder per library next to setup.py,
        so a reinstall recompiles only what changed; other builds use setuptools' build_temp."""
        name = ext.name.rsplit(".", 1)[-1]
        if self.final_in_source_tree:
            return Path("build") / "aot_libraries" / name
        return Path(self.build_temp) / "aot_libraries" / name

    def get_outputs(self) -> list[str]:
        outputs = super().get_outputs()
        from ._build.build_info import record_path

        records = [record_path(Path(self.get_ext_fullpath(e.name))) for e in self.extensions
                   if isinstance(e, AotExtension)]
        return outputs + [str(r) for r in records]
