"""from_torch(..., fuse="compile"): the fused programs compiled ahead of time by torch's own compiler.

fuse=True interprets AOTAutograd's graphs one ATen call at a time; torch runs those graphs slower than its eager
step, because they make more calls. Inductor fuses them into fewer loops, and AOTInductor packages the result as
a shared library that runs with no Python. Each graph a ported cell runs is exported as a module that takes every
program input (the weights included: they stay MindSpore Parameters, nothing is baked in) and compiled for the
CPU; the program entry (kernels/aten/generic/program.cpp) loads the package once per process and runs it on
MindSpore's buffers. Shapes, dtypes, saved tensors and the cell's wiring are the interpreted program's, so a
compiled program replaces an interpreted one one for one, and a graph that does not compile keeps its interpreted
program, with a CompileFallbackWarning naming why (never a different result).

Sizes: a graph with dynamic sizes is compiled for the values its port gives them (compile_inputs), the program
keeping its nodes for every other size; a size given no value is compiled as dynamic, over the range the export
gave it (from_torch_lm's positions attended), and the program entry checks each launch against that range.

Which graphs: in training mode the forward and backward programs, in evaluation mode the inference program (a
mode whose graph is the same in both gets all three). The gradient of an evaluation-mode cell runs its
interpreted programs: compiling each takes seconds to tens of seconds, and that case is rare.

Packages live in the build cache, under compiled/<key>/, where the key covers the graph (its code, its constant
tensors, its inputs' shapes and dtypes, the outputs taken), torch's version, Inductor's settings, the thread count
and the compiler's name. The compiler's identity (path, size, mtime) is recorded when compiling: when it has
changed the package is rebuilt, and when there is no compiler at all a package already built is loaded.

Threads: Inductor fixes the thread count of its parallel loops when it compiles, to torch.get_num_threads() at
that time (part of the key): call torch.set_num_threads before from_torch. The ATen calls the compiled code
makes (matrix products) use torch's thread count at run time, as every bridged call does.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..._build import cache, private
from ..._build.lock import BuildLock
from ..._build.progress import progress
from ..._core import dtypes
from ..._core.primitive import CALL_LOCK
from ..._core.silenced_logs import silenced
from ..._core.torch_private import aoti_compile_and_package, inductor_config, inductor_threads
from ...errors import Error
from ..errors import raised_by_aot_ops
from .program import Program, views_as_reshapes, with_key

# Bumped when what a package holds or how it is made changes, so older packages are not loaded.
FORMAT = 1
# Inductor settings of the training programs (part of the key). No layout optimisation there: the activations a
# forward saves cross into MindSpore as contiguous buffers and back into the backward, so channels-last
# convolutions would convert them at both program boundaries (a ported ResNet's compiled training step spent
# 5.4 ms in its programs with it off, 6.4 ms with it on). The inference program keeps Inductor's default, as only
# the network's input and outputs cross (the ResNet's evaluation forward at batch 32: 4.7 ms with, 6.6 without).
TRAINING_CONFIGS: dict = {"layout_optimization": False}


# Inductor settings of an inference program whose matrix products are in half precision. A decoding step of one
# sequence multiplies one row by each weight: ATen's bfloat16 product (oneDNN) reads the weights at about 28 GB/s
# on the 2-core reference machine, where Inductor's own loop of products summed in float32 streams them at about
# 37 GB/s (a bfloat16 sum: 41 GB/s; docs/performance.md). Inductor has that rewrite as its "decompose_mm_pass",
# which on the CPU takes products of one row only (statically 1: a batch of one) and of weights up to 2,048 wide
# unless told otherwise; any width here. Its sums round as Inductor's loops do, not as oneDNN's blocks (one
# output in about 2,800 differs by one bfloat16 step): as every fused kernel of a compiled program does.
HALF_PRECISION_MATVEC_CONFIGS: dict = {"post_grad_fusion_options": {"decompose_mm_pass": {
    "cpu_max_first_dimension_decomposition": 1, "cpu_max_other_dimension_decomposition": 2 ** 62}}}
_MATRIX_PRODUCTS = {torch.ops.aten.linear.default, torch.ops.aten.mm.default, torch.ops.aten.addmm.default,
                    torch.ops.aten.matmul.default}


def inference_configs(module: torch.fx.GraphModule) -> dict:
    """Inductor settings of an inference program: HALF_PRECISION_MATVEC_CONFIGS where a matrix product of the
    graph is in half precision, else Inductor's defaults."""
    for node in module.graph.nodes:
        if node.op == "call_function" and node.target in _MATRIX_PRODUCTS:
            value = node.meta.get("val")
            if isinstance(value, torch.Tensor) and value.dtype in (torch.bfloat16, torch.float16):
                return HALF_PRECISION_MATVEC_CONFIGS
    return {}


class CompileFallbackWarning(UserWarning):
    """A graph of a cell ported with fuse="compile" did not compile and runs interpreted (as fuse=True)."""


class NotCompilable(Error):
    """A graph this module does not give AOTInductor (said why): it runs interpreted, as one torch cannot compile.
    Caught by compiled_or_interpreted: never reaches the user."""


@dataclass
class GraphSource:
    """What a program computes, as a torch module to compile: `module` takes the program's first `num_used`
    inputs (the rest are constants the interpreted program reads and the module holds itself) and returns a
    tuple, of which the program's outputs are the entries at `picks`. `inputs`: the shape and dtype of every
    program input (MindSpore passes them contiguous). `configs`: Inductor settings for this graph."""

    module: torch.fx.GraphModule
    num_used: int
    picks: list[int]
    inputs: list[tuple[tuple[int, ...], torch.dtype]]
    configs: dict = field(default_factory=dict)
    # (program input, module output): the program writes that output into that input (program_writes); compiled,
    # the package writes it itself (Inductor then writes the changed positions only: a cache's new token)
    writes: list[tuple[int, int]] = field(default_factory=list)


class _Program(torch.nn.Module):
    """The module torch.export sees: the program's inputs in, the program's outputs out."""

    def __init__(self, source: GraphSource):
        super().__init__()
        self.graph = views_as_reshapes(source.module)
        self.num_used = source.num_used
        self.picks = list(source.picks)
        self.writes = list(source.writes)

    def forward(self, *inputs):
        outs = self.graph(*inputs[:self.num_used])
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        for i, k in self.writes:
            inputs[i].copy_(outs[k])
        return tuple(outs[k] for k in self.picks)


def compile_program(program: Program, source: GraphSource, sizes: dict | None = None) -> Program:
    """`program` with its body replaced by an AOTInductor package (compiled, or found in the cache). With dynamic
    sizes, `sizes` gives each size symbol's value in the one signature compiled, and the program keeps its nodes
    for every other size. Raises on any failure."""
    name = program.attrs["program_name"]
    if len(source.inputs) != program.num_inputs:
        raise ValueError(f"{name}: {len(source.inputs)} example inputs for {program.num_inputs} program inputs")
    if any(dtype is None for _shape, dtype in source.inputs):
        raise NotCompilable(f"{name}: an input of the graph is not a tensor")
    shapes, free = _compiled_shapes([shape for shape, _ in source.inputs], sizes or {}, name)
    examples = tuple(torch.zeros(shape, dtype=dtype) for shape, (_, dtype) in zip(shapes, source.inputs))
    key = _key(source, examples, free)
    package = _package(key, name, source, examples, free)
    # with dynamic sizes the nodes stay for the sizes the package does not take
    attrs = dict(program.attrs) if len(free) < _symbol_count(source) else {
        k: v for k, v in program.attrs.items() if k not in ("program_nodes", "program_num_nodes")}
    attrs["program_package"] = str(package)
    if source.writes:
        attrs["program_package_writes"] = True  # the package writes program_writes' inputs itself
    attrs["program_input_shapes"] = [n for shape in shapes for n in (len(shape), *shape)]
    if free:
        attrs["program_input_ranges"] = [n for size in free for n in (size.input, size.dim, size.min, size.max)]
    try:
        attrs["program_input_dtypes"] = ",".join(dtypes.checked_ms_name(dtype) for _, dtype in source.inputs)
    except TypeError as exc:
        raise NotCompilable(f"{name}: {exc}") from None
    return Program(with_key(attrs), program.num_inputs, list(program.out_dtypes))


@dataclass(frozen=True)
class FreeSize:
    """A size of a program input compiled as dynamic: the package takes any value in [min, max] (max -1: no bound)."""

    input: int
    dim: int
    symbol: str
    min: int
    max: int


def _compiled_shapes(shapes: list[tuple], sizes: dict, name: str) -> tuple[list[tuple[int, ...]], list[FreeSize]]:
    """Each input's shape to compile for, its symbolic sizes evaluated with `sizes` (size symbol -> value), and
    the sizes left free: a size symbol `sizes` does not give is compiled as dynamic within the range the export
    gave it (its example the value it was exported with). A size that is an expression of a free symbol is not
    compiled (NotCompilable)."""
    concrete, free = [], []
    for i, shape in enumerate(shapes):
        dims = []
        for d, n in enumerate(shape):
            if isinstance(n, torch.SymInt):
                value = n.node.expr.subs(sizes)
                if not value.is_number:
                    if not value.is_Symbol or n.node.hint is None:
                        raise NotCompilable(f"{name}: the size {n.node.expr} is dynamic and no value to compile it "
                                            "for was given")
                    bounds = n.node.shape_env.var_to_range[value]
                    upper = bounds.upper if bounds.upper.is_finite else -1
                    free.append(FreeSize(i, d, str(value), int(bounds.lower), int(upper)))
                    value = n.node.hint
                n = int(value)
            dims.append(int(n))
        concrete.append(tuple(dims))
    return concrete, free


def _symbol_count(source: GraphSource) -> int:
    """How many sizes of the program's inputs are symbolic."""
    return sum(isinstance(n, torch.SymInt) for shape, _ in source.inputs for n in shape)


def _dynamic_shapes(examples: tuple, free: list[FreeSize]) -> dict | None:
    """torch.export's dynamic_shapes for _Program(*inputs): one Dim per free symbol, shared by its sizes."""
    if not free:
        return None
    dims = {size.symbol: torch.export.Dim(f"size_{size.symbol}", min=size.min,
                                          max=size.max if size.max >= 0 else None) for size in free}
    specs: list[dict | None] = [None] * len(examples)
    for size in free:
        specs[size.input] = {**(specs[size.input] or {}), size.dim: dims[size.symbol]}
    return {"inputs": tuple(specs)}


def compiled_or_interpreted(program: Program, source: GraphSource, sizes: dict | None = None) -> Program:
    """compile_program, or `program` itself with a CompileFallbackWarning when torch cannot compile it (an error
    raised in aot_ops' own code is not a reason to fall back: it propagates)."""
    try:
        return compile_program(program, source, sizes)
    except Exception as exc:  # noqa: BLE001 - any failure of export or Inductor: the interpreted program runs
        if raised_by_aot_ops(exc) and not isinstance(exc, NotCompilable):
            raise
        reason = f"{type(exc).__name__}: {_first_lines(str(exc))}"
        warnings.warn(f"{program.attrs['program_name']}: not compiled, runs interpreted (as fuse=True): {reason}",
                      CompileFallbackWarning, stacklevel=4)
        return program


def is_compiled(program: Program) -> bool:
    """Whether a package runs the program (for every input, or with dynamic sizes for the signature compiled)."""
    return "program_package" in program.attrs


def compiler() -> str:
    """The C++ compiler Inductor calls ($CXX when torch was imported, else g++)."""
    config = inductor_config()
    names = config.cpp.cxx if isinstance(config.cpp.cxx, (tuple, list)) else (config.cpp.cxx,)
    return next((n for n in reversed(names) if n), "g++")


# ---- the cache ------------------------------------------------------------------------------------------------

def _key(source: GraphSource, examples: tuple[torch.Tensor, ...], free: list[FreeSize]) -> str:
    digest = hashlib.sha256()
    code = "\n".join(line for line in source.module.code.splitlines() if not line.strip().startswith("#"))
    description = dict(format=FORMAT, code=code, used=source.num_used, picks=source.picks, writes=source.writes,
                       inputs=[(tuple(e.shape), str(e.dtype)) for e in examples], torch=torch.__version__,
                       free=[(f.input, f.dim, f.symbol, f.min, f.max) for f in free],
                       configs=sorted(source.configs.items()), threads=inductor_threads(), compiler=compiler(),
                       cxxflags=os.environ.get("CXXFLAGS", ""), inductor=_inductor_settings(), cpu=_cpu())
    digest.update(json.dumps(description, sort_keys=True, default=str).encode())
    for name, tensor in sorted(_module_tensors(source.module).items()):
        digest.update(name.encode() + b"\0" + str(tensor.dtype).encode() + str(tuple(tensor.shape)).encode())
        digest.update(tensor.detach().contiguous().cpu().numpy().tobytes())
    return digest.hexdigest()[:cache.KEY_LENGTH * 2]


def _cpu() -> str:
    """The processor the code is compiled for: Inductor compiles with -march=native, so a package built on one
    CPU model may not run on another (a cache folder shared between machines)."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return platform.machine()
    keep = {"model name", "flags", "vendor_id", "cpu family", "model"}
    first = {}
    for line in lines:
        name, _, value = line.partition(":")
        if name.strip() in keep:
            first.setdefault(name.strip(), value.strip())
    return platform.machine() + ":" + hashlib.sha256(repr(sorted(first.items())).encode()).hexdigest()[:16]


def _inductor_settings() -> str:
    """Inductor's configuration as torch's own cache keys it."""
    config = inductor_config()
    # Inductor fills this entry in place during a compile (the platform and ISA it compiled for), so it would
    # differ between a process that compiled and one that did not.
    return portable_settings(config, leave_out=("aot_inductor.metadata",))


def portable_settings(config, leave_out: tuple[str, ...] = ()) -> str:
    """A torch config module's portable part (no process-specific values) as JSON, for a cache key; "" where
    this torch cannot give it."""
    try:
        settings = dict(config.save_config_portable())
    except Exception:  # noqa: BLE001 - an older or newer torch: the version in the key covers its defaults
        return ""
    for name in leave_out:
        settings.pop(name, None)
    return json.dumps(settings, sort_keys=True, default=repr)


def _module_tensors(module: torch.fx.GraphModule) -> dict[str, torch.Tensor]:
    """The tensors the graph holds itself (its constants: not program inputs, so part of the key)."""
    found = dict(module.named_buffers())
    found.update(dict(module.named_parameters()))
    for node in module.graph.nodes:
        if node.op == "get_attr":
            value = module
            for part in str(node.target).split("."):
                value = getattr(value, part, None)
            if isinstance(value, torch.Tensor):
                found[str(node.target)] = value
    return found


def _package(key: str, name: str, source: GraphSource, examples: tuple, free: list[FreeSize]) -> Path:
    """The folder of the unpacked package for `key`: the cached one, else compiled now (one compiler per key
    across processes)."""
    root = private.private_dir(cache.private_root() / "compiled")
    folder = root / key
    with BuildLock(root / f"{key}.lock", f"the compiled program {name}"):
        found = _cached(folder)
        if found is not None:
            return found
        return _compile(folder, name, source, examples, free)


def _cached(folder: Path) -> Path | None:
    entry = cache.read_own_json(folder / "entry.json") if folder.is_dir() else None
    if entry is None or entry.get("format") != FORMAT:
        return None
    available = shutil.which(compiler())
    if available and entry.get("compiler_identity") != cache.tool_identity(compiler()):
        return None  # another compiler, or another build of it, since: rebuilt
    package = folder / "package"
    for relative, sha256 in entry["files"].items():
        private.check_published(package / relative, sha256)
    return package


def _compile(folder: Path, name: str, source: GraphSource, examples: tuple, free: list[FreeSize]) -> Path:
    start = time.monotonic()
    with progress(f"{name} with AOTInductor", show_after=0.0, every=10.0), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's deprecations inside export and Inductor
        with CALL_LOCK:  # no aot_ops call in another thread while the process is marked exporting (export.py)
            exported = torch.export.export(_Program(source), examples,
                                           dynamic_shapes=_dynamic_shapes(examples, free), strict=False)
        with tempfile.TemporaryDirectory(prefix="aoti_", dir=folder.parent) as scratch:
            archive = Path(scratch) / "model.pt2"
            # Inductor's info logs are not the user's business (errors still raise); this thread's alone dropped
            with silenced("torch._inductor", below=logging.WARNING):
                aoti_compile_and_package(exported, package_path=str(archive), inductor_configs=dict(source.configs))
            staging = Path(scratch) / "package"
            with zipfile.ZipFile(archive) as zf:
                zf.extractall(staging)
            files = {str(p.relative_to(staging)): private.file_sha256(p) for p in sorted(staging.rglob("*"))
                     if p.is_file()}
            for path in staging.rglob("*"):
                os.chmod(path, 0o700 if path.is_dir() or os.access(path, os.X_OK) else 0o600)
            if folder.exists():
                shutil.rmtree(folder)
            private.private_dir(folder)
            os.replace(staging, folder / "package")
    entry = dict(format=FORMAT, program=name, files=files, compile_seconds=round(time.monotonic() - start, 2),
                 compiler=compiler(), compiler_identity=cache.tool_identity(compiler()), torch=torch.__version__)
    cache.write_json_atomically(folder / "entry.json", entry)
    return folder / "package"


def _first_lines(text: str, count: int = 3) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    shown = " | ".join(lines[:count])
    return shown + (" ..." if len(lines) > count else "")
