"""Compile sources into an aot shared library with ninja, check that it loads, and publish it atomically."""
from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from . import cuda, npu, runtime, toolchain
from ..errors import Error

log = logging.getLogger("aot_ops.build")

# How many compiler diagnostics an exception shows; the whole log stays on disk.
_SHOWN_ERRORS = 8


class BuildError(Error, RuntimeError):
    """A compile, link or load-check failure. The message shows the first diagnostics; `log_path` has them all."""

    def __init__(self, stage: str, summary: str, log_path: Path | None):
        self.stage = stage
        self.log_path = log_path
        where = f"\nfull log: {log_path}" if log_path else ""
        super().__init__(f"{stage} failed:\n{summary}{where}")


@dataclass
class LibrarySpec:
    """What to build: one shared library from `sources`.

    `use_torch=False` builds a library that neither includes nor links torch (a plain C/C++ kernel).
    Sources are compiled by suffix: `.cu` with nvcc, `.c` with the C compiler, anything else as C++.
    `torch_runpath`: where the installed library finds torch's libraries, relative to itself
    (`$ORIGIN/../../torch/lib`), for libraries shipped in a package; None: this environment's torch, absolute.
    `npu_toolchain`: build with NPU placement against torch_npu (npu.py): every C++ unit gets its flags, and
    ms_ext's NPU runtime unit (torch_npu and ACL) is compiled in and linked, unless `npu_runtime_in_sources` (the
    sources answer ms_ext/detail/npu_runtime.h themselves: a test device).
    """

    name: str
    sources: Sequence[Path]
    use_torch: bool = True
    extra_cflags: Sequence[str] = ()
    extra_ldflags: Sequence[str] = ()
    extra_include_paths: Sequence[Path] = ()
    torch_runpath: Sequence[str] | None = None
    npu_toolchain: npu.NpuToolchain | None = None
    npu_runtime_in_sources: bool = False
    # ms_ext's runtime objects to link (runtime.py): None links those installed with aot_ops when they match this
    # ms_ext and compiler; () or a mismatch compiles the runtime units with the library.
    runtime_objects: Sequence[Path] | None = None

    @property
    def has_cuda(self) -> bool:
        return any(cuda.is_cuda_source(s) for s in self.sources)

    @property
    def has_npu_runtime(self) -> bool:
        """Whether ms_ext's NPU runtime unit (torch_npu and ACL) is compiled in."""
        return self.npu_toolchain is not None and not self.npu_runtime_in_sources


def _object_name(index: int, source: Path) -> str:
    return f"obj/{index:03d}_{re.sub(r'[^A-Za-z0-9_]', '_', source.stem)}.o"


def _user_units(spec: LibrarySpec) -> list[tuple[Path, str, list[str]]]:
    include = [f"-I{p}" for p in spec.extra_include_paths]
    npu_flags = spec.npu_toolchain.cflags() if spec.npu_toolchain is not None else []
    cxx_flags = [*(toolchain.torch_cflags() if spec.use_torch else toolchain.plain_cflags()), *npu_flags, *include,
                 *spec.extra_cflags]
    units = []
    sources = list(spec.sources)
    if spec.has_npu_runtime:
        sources.append(toolchain.ms_ext_dir() / "src" / npu.RUNTIME_SOURCE)
    for source in sources:
        source = Path(source).resolve()
        if cuda.is_cuda_source(source):
            units.append((source, "nvcc", [*cuda.nvcc_cflags(spec.use_torch), *include, *spec.extra_cflags]))
        elif source.suffix == ".c":
            units.append((source, "cc", [*toolchain.C_CFLAGS, f"-I{toolchain.ms_ext_include_dir()}", *include,
                                         *spec.extra_cflags]))
        else:
            units.append((source, "cxx", cxx_flags))
    return units


def _linked_and_compiled(spec: LibrarySpec) -> tuple[list[Path], list[tuple[Path, str, list[str]]]]:
    """The prebuilt objects the library links, and the units it compiles (source, rule, flags), in link order."""
    linked = list(spec.runtime_objects) if spec.runtime_objects is not None else runtime.prebuilt() or []
    units = [] if linked else [(src, "cxx", flags) for src, flags in runtime.units()]
    return linked, units + _user_units(spec)


def write_ninja_file(spec: LibrarySpec, build_dir: Path, library: Path) -> Path:
    """A build.ninja with one rule per ABI: the MindSpore-facing runtime TU is compiled with ABI 0, everything
    that may touch torch with torch's ABI. ninja's depfiles make rebuilds follow edited headers. ms_ext's runtime
    units are linked from the objects installed with aot_ops when those match (runtime.py), else compiled here.

    `objects` is a target of its own: CUDA sources can be compiled on a machine that cannot link them."""
    return _write_ninja_file(spec, build_dir, library, *_linked_and_compiled(spec))


def _write_ninja_file(spec: LibrarySpec, build_dir: Path, library: Path, linked: list[Path],
                      units: list[tuple[Path, str, list[str]]]) -> Path:
    from ninja.ninja_syntax import Writer, escape  # the `ninja` PyPI package

    path = build_dir / "build.ninja"
    with open(path, "w") as fh:
        w = Writer(fh, width=120)
        w.variable("cxx", escape(shlex.quote(toolchain.cxx())))
        w.rule("cxx", "$cxx -MMD -MF $out.d $cflags -c $in -o $out", depfile="$out.d", deps="gcc",
               description="compile $in")
        if any(rule == "cc" for _, rule, _ in units):
            w.variable("cc", escape(shlex.quote(toolchain.cc())))
            w.rule("cc", "$cc -MMD -MF $out.d $cflags -c $in -o $out", depfile="$out.d", deps="gcc",
                   description="compile $in")
        if spec.has_cuda:
            nvcc = cuda.nvcc()
            if nvcc is None:
                raise cuda.CudaSetupError("nvcc not found: CUDA sources need the CUDA toolkit (set CUDA_HOME or put "
                                          "nvcc on PATH)")
            w.variable("nvcc", escape(shlex.quote(nvcc)))
            w.rule("nvcc", "$nvcc -MD -MF $out.d $cflags -c $in -o $out", depfile="$out.d", deps="gcc",
                   description="compile $in")
        w.rule("link", "$cxx $in -o $out $ldflags", description="link $out")
        objects = []
        for i, (source, rule, flags) in enumerate(units):
            obj = _object_name(i, source)
            _build(fh, [obj], rule, [str(source)], {"cflags": " ".join(shlex.quote(f) for f in flags)})
            objects.append(obj)
        _build(fh, ["objects"], "phony", objects, {})
        objects = [str(obj) for obj in linked] + objects
        ldflags = toolchain.link_flags(spec.use_torch, spec.torch_runpath) + list(spec.extra_ldflags)
        if spec.has_cuda:
            ldflags += cuda.link_flags(spec.use_torch)
        if spec.has_npu_runtime:
            # An installed library finds torch_npu beside torch, as it finds torch (relative to itself)
            relative = (None if spec.torch_runpath is None else
                        [entry.replace("torch/lib", "torch_npu/lib") for entry in spec.torch_runpath])
            ldflags += spec.npu_toolchain.ldflags(relative)
        _build(fh, [library.name], "link", objects, {"ldflags": " ".join(shlex.quote(f) for f in ldflags)})
        w.default(_ninja_path(library.name))
    return path


def _ninja_path(path: str) -> str:
    """A path as ninja reads it in a build statement: '$', ' ' and ':' escaped (ninja_syntax leaves '$' alone, so
    a source folder named 'a$b' would break the build)."""
    return path.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def _build(fh, outputs: Sequence[str], rule: str, inputs: Sequence[str], variables: dict[str, str]) -> None:
    from ninja.ninja_syntax import escape

    fh.write(f"build {' '.join(map(_ninja_path, outputs))}: {rule} {' '.join(map(_ninja_path, inputs))}\n")
    for key, value in variables.items():
        fh.write(f"  {key} = {escape(value)}\n")


def first_diagnostics(output: str, limit: int = _SHOWN_ERRORS) -> str:
    """The compiler's first `file:line:col: error:` lines with the line after each (the source excerpt), or the
    tail of the output when the failure is not a compiler diagnostic (a link error, a missing tool)."""
    lines = output.splitlines()
    picked: list[str] = []
    for i, line in enumerate(lines):
        if re.search(r"(error|fatal error):", line) or "undefined reference" in line:
            picked.append(line)
            if i + 1 < len(lines) and lines[i + 1].startswith(" "):
                picked.append(lines[i + 1])
            if len(picked) >= 2 * limit:
                break
    if not picked:
        picked = [line for line in lines if line.strip()][-15:]
    return "\n".join(picked)


_PROGRESS_LINE = re.compile(r"^\[\d+/\d+\] ")


def ninja_command(build_dir: Path, verbose: bool = False, targets: Sequence[str] = ()) -> list[str]:
    """ninja, with MAX_JOBS parallel jobs when it is set (torch.utils.cpp_extension's convention: a small machine
    or a memory-hungry nvcc needs fewer than ninja's default)."""
    cmd = [toolchain.ninja_binary(), "-C", str(build_dir)]
    jobs = os.environ.get("MAX_JOBS", "").strip()
    if jobs:
        if not jobs.isdigit() or int(jobs) < 1:
            raise BuildError("ninja", f"MAX_JOBS={jobs!r} is not a positive number of jobs", None)
        cmd += ["-j", jobs]
    if verbose:
        cmd.append("-v")
    return cmd + list(targets)


def run_ninja(build_dir: Path, verbose: bool = False, targets: Sequence[str] = (),
              progress_after_s: float = 2.0) -> str:
    """Run ninja; its `[n/m] compile ...` lines go to stderr once the build has taken `progress_after_s` (a quick
    rebuild stays quiet, a long one shows where it is). The whole output is kept in build.log."""
    proc = subprocess.Popen(ninja_command(build_dir, verbose, targets), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    start = time.monotonic()
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if verbose or (_PROGRESS_LINE.match(line) and time.monotonic() - start >= progress_after_s):
            sys.stderr.write(f"aot_ops: {line}" if not verbose else line)
            sys.stderr.flush()
    returncode = proc.wait()
    output = "".join(lines)
    log_path = build_dir / "build.log"
    log_path.write_text(output)
    if returncode != 0:
        stage = "link" if "FAILED: " in output and re.search(r"FAILED: \S+\.so", output) else "compile"
        raise BuildError(stage, first_diagnostics(output), log_path)
    return output


# dlopen as MindSpore does, then name the torch libraries the dynamic loader chose (what RUNPATH resolved to).
_LOAD_PROBE = """
import ctypes, json, os, sys
ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_LOCAL)
with open("/proc/self/maps") as maps:
    print(json.dumps(sorted({line.split()[-1] for line in maps if "/libc10.so" in line or "/libtorch_cpu.so" in line})))
"""


def load_in_clean_process(library: Path, torch_lib_dir: str | None = None) -> subprocess.CompletedProcess:
    """dlopen `library` with RTLD_NOW in a fresh interpreter that has not imported torch and has no
    LD_LIBRARY_PATH: exactly the conditions under which MindSpore loads it. On success its stdout's last line is
    the JSON list of the torch libraries it loaded. `torch_lib_dir` is put on LD_LIBRARY_PATH instead (see
    check_loads)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if torch_lib_dir is not None:
        env["LD_LIBRARY_PATH"] = torch_lib_dir
    return subprocess.run([sys.executable, "-c", _LOAD_PROBE, str(library)], capture_output=True, text=True,
                          env=env, timeout=300)


def check_loads(library: Path, log_path: Path | None = None, torch_lib_dir: str | None = None) -> None:
    """Refuse a library that does not load the way MindSpore loads it (load_in_clean_process).

    A library whose RUNPATH is relative to where it will be installed cannot find torch where it is built; for
    it `torch_lib_dir` stands in for the installed layout, and every symbol must still resolve."""
    proc = load_in_clean_process(library, torch_lib_dir)
    if proc.returncode != 0:
        text = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        if log_path is not None:
            with open(log_path, "a") as fh:
                fh.write(f"\nload check of {library} failed:\n{proc.stderr}")
        raise BuildError("load check (dlopen with RTLD_NOW)", text, log_path)


def build_objects(spec: LibrarySpec, build_dir: Path, verbose: bool = False) -> list[Path]:
    """Compile without linking: what can be verified of CUDA sources on a machine that cannot link them."""
    build_dir = Path(build_dir)
    (build_dir / "obj").mkdir(parents=True, exist_ok=True)
    linked, units = _linked_and_compiled(spec)
    _write_ninja_file(spec, build_dir, build_dir / f"{spec.name}.so", linked, units)
    run_ninja(build_dir, verbose=verbose, targets=["objects"])
    return [build_dir / _object_name(i, source) for i, (source, _, _) in enumerate(units)]


def build_library(spec: LibrarySpec, build_dir: Path, output: Path, verbose: bool = False) -> Path:
    """Build `spec` in `build_dir` and publish it at `output`.

    The library is linked under a temporary name, load-checked, then renamed into place, so a reader never sees
    a half-written or unloadable `.so` (and a failed build leaves the previous one untouched).
    """
    build_dir = Path(build_dir)
    output = Path(output)
    (build_dir / "obj").mkdir(parents=True, exist_ok=True)
    staged = build_dir / f"{spec.name}.so"
    write_ninja_file(spec, build_dir, staged)
    run_ninja(build_dir, verbose=verbose)
    relocated = spec.use_torch and spec.torch_runpath is not None
    check_loads(staged, build_dir / "build.log", toolchain.torch_info().lib_dir if relocated else None)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    tmp.write_bytes(staged.read_bytes())
    os.chmod(tmp, 0o755)
    os.replace(tmp, output)
    log.info("built %s", output)
    return output
