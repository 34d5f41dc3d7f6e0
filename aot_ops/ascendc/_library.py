"""Your own Ascend C kernels, from one declaration, in MindSpore and in torch, checked on the CPU emulator.

    def mul_tiling(x, y, *, block_dim, ub_bytes):           # Python, compiled to C++ (tiling.py)
        n = x.numel()
        ascendc.require(n % (256 * block_dim) == 0, "numel must be a multiple of 256 * block_dim")
        return {"totalLength": n}

    lib = aot_ops.ascendc.load("my_kernels", ["mul_custom.cpp"], kernels={
        "mul_custom": ascendc.Kernel(inputs=["x", "y"], outputs=["z"], dtypes=["float16"],
                                     scalars={"totalLength": "uint32"}, tiling=mul_tiling,
                                     fallback="aten::mul.Tensor", output_like={"z": "x"}),
    })
    mul = lib.mul_custom(block_dim=8)          # a MindSpore operator: both modes, gradient from the fallback's
    torch.ops.my_kernels.mul_custom(a, b)      # a torch.library operator (fake impl, autograd, torch.compile)
    lib.npu_project                            # the CANN project of the same kernels (python -m aot_ops.ascendc.npu)

`load` generates the emulator launch, the MindSpore entry point, the torch entry point and the NPU project from
the declaration, and builds the library with the project's builder (cache, lock, compiler errors with the file and
line of your kernel). Each call runs the kernel on the emulator where the dtypes and the tiling allow it and the
fallback otherwise, counted by aot_ops.ascendc.runtime.path_count(<kernel>, "kernel" | "aten"); the emulator
settings (core order, UB size) are the process-wide ones of aot_ops.ascendc.runtime.
"""
from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Mapping, Sequence

from .._core import library as _library
from .._build import cache
from .._build.bundled import library_path
from .._native.paths import source_dir
from . import _codegen as codegen
from ._declare import Kernel, fallback_argument_names

PathLike = str | os.PathLike


class AscendcLibrary:
    """A library built by `ascendc.load`: `lib.<kernel>(block_dim=8)` is the MindSpore operator of a kernel,
    `torch.ops.<name>.<kernel>` its torch operator, `npu_project` the folder of its CANN build (None for the
    bundled kernels' library, whose project bundled.npu_project() writes when asked)."""

    def __init__(self, name: str, library: _library.Library, kernels: dict[str, Kernel], npu_project: Path):
        self.name = name
        self.library = library
        self.path = library.path
        self.kernels = kernels
        self.npu_project = npu_project

    def __getattr__(self, item: str):
        kernels = self.__dict__.get("kernels", {})
        if item not in kernels:
            raise AttributeError(f"library {self.__dict__.get('name')!r} declares no kernel {item!r} "
                                 f"(it has {', '.join(kernels) or 'none'})")
        return functools.partial(self.operator, item)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self.kernels))

    def __repr__(self) -> str:
        return f"<aot_ops.ascendc library {self.name!r}: {', '.join(self.kernels)} in {self.path}>"

    def operator(self, kernel: str, block_dim: int = 8, **attrs):
        """The MindSpore operator of `kernel`, launched on `block_dim` cores, with the declared attributes (defaults
        for those not given); one operator per configuration, cached."""
        declared = self.kernels[kernel].attrs
        unknown = sorted(set(attrs) - set(declared))
        if unknown:
            raise TypeError(f"{kernel}: unknown attribute(s) {', '.join(unknown)} (declared: "
                            f"{', '.join(declared) or 'none'})")
        values = {name: type(default)(attrs.get(name, default)) for name, default in declared.items()}
        key = (kernel, int(block_dim), tuple(values.items()))
        made = self.__dict__.setdefault("_operators", {})
        if key not in made:
            made[key] = _operator(self.path, self.name, kernel, self.kernels[kernel], int(block_dim), values)
        return made[key]


def _operator(path: Path, library_name: str, kernel_name: str, kernel: Kernel, block_dim: int, attrs: dict):
    """An AotOp of the generated entry point: its outputs inferred by the kernel's C++ rule (output_like) or the
    fallback's meta inference, and the fallback's bprop (its ATen backward) as its gradient; the fallback's
    arguments named like an attribute take its value."""
    from .. import aten
    from .._core.arity import Arity
    from .._core.inference import MetaInference
    from .._core.opdef import OpDef
    schema_args = fallback_argument_names(kernel.fallback)
    fallback = aten.op(kernel.fallback, **{k: v for k, v in attrs.items() if k in schema_args},
                       **kernel.fallback_args)
    fallback = getattr(fallback, "op", fallback)  # the primitive inside an optional-inputs cell
    infer = None  # output_like: <Entry>InferShape in C++, dynamic shapes included
    if not kernel.output_like:  # the fallback's inference, under the kernel's name
        infer = MetaInference(codegen.entry_symbol(kernel_name), fallback.infer.fn, dynamic_advice=(
            f"Declare output_like in the ascendc.Kernel of {kernel_name} if its outputs are shaped like inputs: "
            "then they are inferred in C++, dynamic shapes included"))
    return OpDef(path, codegen.entry_symbol(kernel_name), {"block_dim": block_dim, **attrs}, bprop=fallback.bprop,
                 infer=infer, arity=Arity(len(kernel.inputs)),
                 identity=f"ascendc:{library_name}:{kernel_name}:{path}:{block_dim}:{sorted(attrs.items())!r}").build()


def load(name: str, sources: Sequence[PathLike] | PathLike, kernels: Mapping[str, Kernel], *,
         extra_cflags: Sequence[str] = (), verbose: bool = False) -> AscendcLibrary:
    """Builds (or takes from the cache) the library `name` of the Ascend C kernels in `sources`, declared in
    `kernels`, and registers its torch operators under torch.ops.<name>. See the module docstring."""
    paths = _library.resolve_sources(sources, f"aot_ops.ascendc.load({name!r})")
    kernels = {k: v.checked(k) for k, v in kernels.items()}
    if not kernels:
        raise ValueError(f"aot_ops.ascendc.load({name!r}): declare at least one kernel")
    generated = cache.name_dir(name) / "generated" / f"{name}_ascendc_entries.cpp"
    compiled = codegen.tilings(kernels)
    text = codegen.library_source(name, kernels, compiled, str(library_path("ascendc")))
    emulator = source_dir("kernels") / "ascendc"
    include_paths = [emulator / "emulator", emulator / "aot", *sorted({p.parent for p in paths})]
    built = _library._load(name, [*paths, generated], {generated: text}, list(extra_cflags), [], include_paths,
                           True, verbose)
    npu = write_npu_project(cache.name_dir(name) / "npu", name, kernels, compiled, paths)
    lib = AscendcLibrary(name, built, kernels, npu)
    from ._torch_library import register

    register(lib)
    return lib


def write_npu_project(folder: Path, name: str, kernels: dict[str, Kernel], compiled: dict,
                      sources: Sequence[Path]) -> Path:
    """Writes the CANN project of `kernels` (codegen.npu_files) into `folder`, rewriting only changed files."""
    for file_name, content in codegen.npu_files(name, kernels, compiled, [str(p) for p in sources]).items():
        _library._write_if_changed(folder / file_name, content)
    return folder
