"""`python -m aot_ops doctor`: is this environment able to build and run aot operators, and if not, why.

Versions are read from package metadata, never by importing MindSpore: the point is to explain an environment in
which importing it may be what fails (numpy 2 under MindSpore 2.10 is the usual case).
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .._native import opener as _clib
from .._native.paths import CPU_LIBRARY, LIB_DIR
from .._build import builder, cache, cuda, npu, private, toolchain

OK, INFO, WARN, FAIL = "ok", "info", "warn", "FAIL"


@dataclass
class Finding:
    check: str
    status: str  # ok: fine; info: worth knowing; warn: something will not work; FAIL: blocks using aot_ops
    detail: str


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+")[0])[:3])


def _first_line(cmd: list[str]) -> str | None:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    return lines[0] if proc.returncode == 0 and lines else None


def check_python() -> Finding:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info[:2] != (3, 11):
        return Finding("Python", FAIL, f"{version}: aot_ops needs Python 3.11 (MindSpore 2.10 and torch 2.14 wheels "
                                       "are installed for it)")
    return Finding("Python", OK, f"{version} ({sys.executable})")


def check_mindspore() -> Finding:
    version = _version("mindspore")
    if version is None:
        return Finding("MindSpore", FAIL, "not installed: operators run inside MindSpore (building does not need it)")
    return Finding("MindSpore", OK, version)


def check_numpy() -> Finding:
    version = _version("numpy")
    ms = _version("mindspore")
    if version is None:
        return Finding("numpy", FAIL, "not installed (MindSpore and torch need it)")
    if ms and _release(version)[:1] >= (2,) and _release(ms)[:2] <= (2, 10):
        return Finding("numpy", FAIL, f"{version}: MindSpore {ms} is built against NumPy 1.x and ms.Tensor fails "
                                      "under numpy 2 (\"compiled using NumPy 1.x cannot be run in NumPy 2\"); "
                                      "pip install 'numpy<2' (1.26 also works with torch)")
    return Finding("numpy", OK, version)


def check_torch() -> list[Finding]:
    version = _version("torch")
    if version is None:
        return [Finding("torch", FAIL, "not installed: the bundled kernels and ATen-based kernels need it "
                                       "(plain C/C++ kernels build without it)")]
    try:
        import torch

        abi = int(torch.compiled_with_cxx11_abi())
        cuda_version = torch.version.cuda
    except Exception as exc:  # a broken torch install is exactly what the doctor is for
        return [Finding("torch", FAIL, f"{version} is installed but does not import: {exc}")]
    build = f"CUDA {cuda_version}" if cuda_version else "CPU build"
    findings = [Finding("torch", OK, f"{version} ({build})")]
    if abi == 1:
        findings.append(Finding("C++ ABI", OK, "torch uses _GLIBCXX_USE_CXX11_ABI=1, MindSpore 0: handled. Kernels "
                                               "are compiled with torch's flag; the one ms_ext file that reads "
                                               "MindSpore's AotExtra is compiled with ABI 0 behind a C interface, "
                                               "so no std::string crosses between the two"))
    else:
        findings.append(Finding("C++ ABI", OK, f"torch and MindSpore both use _GLIBCXX_USE_CXX11_ABI={abi}"))
    return findings


def check_compilers() -> list[Finding]:
    findings = []
    cxx = toolchain.cxx()
    version = _first_line([cxx, "--version"])
    if version is None:
        findings.append(Finding("C++ compiler", FAIL, f"{cxx} not found or not working (set CXX or install g++)"))
    else:
        findings.append(Finding("C++ compiler", OK, f"{cxx}: {version}"))
    cc = toolchain.cc()
    version = _first_line([cc, "--version"])
    findings.append(Finding("C compiler", OK, f"{cc}: {version}") if version else
                    Finding("C compiler", WARN, f"{cc} not found: only needed for .c sources (set CC)"))
    try:
        ninja = toolchain.ninja_binary()
        findings.append(Finding("ninja", OK, f"{ninja} ({_first_line([ninja, '--version'])})"))
    except FileNotFoundError as exc:
        findings.append(Finding("ninja", FAIL, str(exc)))
    return findings


def check_cuda() -> list[Finding]:
    nvcc = cuda.nvcc()
    if nvcc is None:
        return [Finding("nvcc", INFO, "not found: only needed for .cu sources (set CUDA_HOME or put nvcc on PATH)")]
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    release = re.search(r"release ([\d.]+)", out)
    findings = [Finding("nvcc", OK, f"{nvcc} (CUDA {release.group(1) if release else '?'})")]
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if not arch:
        findings.append(Finding("TORCH_CUDA_ARCH_LIST", WARN, "not set: .cu sources cannot be built until it names "
                                                              "the target GPUs, e.g. \"9.0\" for H100"))
    else:
        try:
            findings.append(Finding("TORCH_CUDA_ARCH_LIST", OK, f"{arch} -> {' '.join(cuda.arch_flags(arch))}"))
        except cuda.CudaSetupError as exc:
            findings.append(Finding("TORCH_CUDA_ARCH_LIST", WARN, str(exc)))
    if cuda.driver_available():
        findings.append(Finding("CUDA driver", OK, "libcuda.so.1 loads"))
    else:
        findings.append(Finding("CUDA driver", INFO, "absent (no GPU here): .cu sources are compiled and checked, "
                                                     "linking and loading them needs a GPU machine"))
    return findings


def check_cann() -> Finding:
    home = npu.find_cann()
    if home is not None:
        return Finding("CANN (Ascend)", OK, f"{home} (lib64/libascendcl.so): NPU libraries link against it")
    for var in ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME"):
        value = os.environ.get(var)
        if value:
            return Finding("CANN (Ascend)", WARN, f"{var}={value} has no lib64/libascendcl.so: NPU libraries "
                                                  "cannot link")
    return Finding("CANN (Ascend)", INFO, "not found (ASCEND_HOME_PATH / ASCEND_TOOLKIT_HOME unset): Ascend "
                                          "operators cannot be built here; CPU and CUDA are unaffected")


def check_torch_npu() -> Finding:
    """torch_npu, found without importing it (its import needs the CANN runtime)."""
    folder = npu.find_torch_npu()
    if folder is None:
        return Finding("torch_npu", INFO, "not installed: the ATen fallbacks cannot run on an Ascend NPU here "
                                          "(aot_ops.load(..., device=\"npu\") and library_path(\"npu\") need it and "
                                          "CANN); CPU and CUDA are unaffected")
    version = _version("torch-npu") or _version("torch_npu")  # None: a folder named by $AOT_OPS_TORCH_NPU
    torch_version = (_version("torch") or "").split("+")[0]
    detail = f"{version or 'unpackaged'} at {folder} (headers and libtorch_npu.so)"
    if version and torch_version and not version.startswith(torch_version):
        return Finding("torch_npu", WARN, f"{detail}; torch is {torch_version}: install the torch_npu release of "
                                          "the same version")
    why = npu.why_not_buildable()
    return Finding("torch_npu", OK if why is None else INFO,
                   detail + ("; NPU libraries build here" if why is None else f"; NPU libraries cannot link: {why}"))


def check_cache() -> Finding:
    root = cache.cache_root()
    source = "$AOT_OPS_CACHE" if os.environ.get("AOT_OPS_CACHE") else "default"
    # Do not create the cache just to look at it: test the folder itself, or the nearest parent that exists.
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not (existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)):
        return Finding("build cache", FAIL, f"{root} ({source}) is not writable ({existing} does not allow it); "
                                            "set AOT_OPS_CACHE to a writable folder")
    unsafe = private.why_unsafe(root)
    if unsafe:
        return Finding("build cache", FAIL, unsafe)
    return Finding("build cache", OK, f"{root} ({source}, private, {len(cache.entries())} libraries)")


def check_white_list() -> Finding:
    folder = os.environ.get(_clib.WHITE_LIST_ENV)
    if folder is None:
        return Finding("aot white list", INFO, f"{_clib.WHITE_LIST_ENV} unset: MindSpore loads aot libraries from "
                                               "anywhere")
    outside = [f"{what} ({path})" for what, path in (("the build cache", cache.cache_root()),
                                                     ("the bundled kernels", LIB_DIR))
               if not _clib.inside_white_list(path)]
    if outside:
        verb = "is" if len(outside) == 1 else "are"
        return Finding("aot white list", WARN, f"{_clib.WHITE_LIST_ENV}={folder}: {' and '.join(outside)} {verb} "
                                               "outside it; MindSpore and aot_ops refuse libraries there")
    return Finding("aot white list", OK, f"{_clib.WHITE_LIST_ENV}={folder}: the cache and the bundled kernels are "
                                         "inside it")


def _runpath(library: Path) -> str:
    try:
        out = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "RUNPATH not shown: readelf not found"
    found = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", out)
    return f"RUNPATH {found.group(1)}" if found else "no RUNPATH"


def _torch_lib_dir() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("torch")  # finds, does not import
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]).resolve() / "lib"


_FRONT_PROBE = "from aot_ops._core import front; print(front.status())"


def check_front() -> Finding:
    """The PyNative fast front (aot_ops/_front): switched on, built, and active in a fresh process."""
    from .._front import ENV_SWITCH, switched_off

    if switched_off():
        return Finding("PyNative front", INFO, f"off ({ENV_SWITCH}={os.environ[ENV_SWITCH]}): eager calls use "
                                               "ops.Custom (slower, same results)")
    proc = subprocess.run([sys.executable, "-c", _FRONT_PROBE], capture_output=True, text=True, timeout=300)
    status = (proc.stdout.strip().splitlines() or [""])[-1]
    if proc.returncode != 0 or not status:
        error = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return Finding("PyNative front", WARN, f"cannot be checked: {error}")
    return Finding("PyNative front", OK if status.startswith("active") else WARN, status)


def check_bundled_library(path: Path) -> Finding:
    """A bundled library loads in a clean process, finds torch's libraries in the installed torch, and was built
    against the installed torch and MindSpore."""
    from .._build import build_info

    name = f"bundled {path.name}"
    proc = builder.load_in_clean_process(path)
    runpath = _runpath(path)
    if proc.returncode != 0:
        error = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return Finding(name, FAIL, f"does not load without `import torch` ({runpath}): {error}; reinstall aot_ops")
    torch_dir = _torch_lib_dir()
    loaded = [Path(p) for p in json.loads(proc.stdout.strip().splitlines()[-1])]
    foreign = [str(p) for p in loaded if torch_dir is not None and p.resolve().parent != torch_dir]
    if foreign:
        return Finding(name, FAIL, f"loads torch libraries from another torch ({', '.join(foreign)}) than the "
                                   f"installed one ({torch_dir}); {runpath}; reinstall aot_ops")
    stale = build_info.mismatch(path)
    if stale:
        return Finding(name, FAIL, f"{stale}; {build_info.REBUILD}")
    recorded = build_info.read(path) or {}
    versions = ", ".join(f"{k} {v}" for k, v in sorted(recorded.items()))
    return Finding(name, OK, f"{path}: loads without `import torch`, {runpath}, built against {versions}")


def check_bundled_libraries() -> list[Finding]:
    found = sorted(LIB_DIR.glob("*.so"))
    if not any(p.name == CPU_LIBRARY for p in found):
        return [Finding("bundled kernels", WARN, f"{LIB_DIR / CPU_LIBRARY} missing: build it with "
                                                 "`pip install --no-build-isolation -e .` (your own kernels are "
                                                 "unaffected)")]
    return [check_bundled_library(p) for p in found]


def diagnose() -> list[Finding]:
    findings = [check_python(), check_mindspore(), check_numpy(), *check_torch(), *check_compilers(),
                *check_cuda(), check_cann(), check_torch_npu(), check_cache(), check_white_list(), *check_bundled_libraries(),
                check_front()]
    return findings


def blocking(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.status == FAIL]


def format_table(findings: list[Finding], width: int = 110) -> str:
    import textwrap

    name_w = max(len(f.check) for f in findings)
    lines = [f"{'check':<{name_w}}  status  detail", f"{'-' * name_w}  ------  {'-' * 40}"]
    for f in findings:
        wrapped = textwrap.wrap(f.detail, max(width - name_w - 10, 30)) or [""]
        lines.append(f"{f.check:<{name_w}}  {f.status:<6}  {wrapped[0]}")
        lines += [f"{'':<{name_w}}  {'':<6}  {more}" for more in wrapped[1:]]
    return "\n".join(lines)
