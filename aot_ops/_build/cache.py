"""The build cache behind `aot_ops.load`: where libraries live, what decides that one must be rebuilt.

A library is stored under a key: a sha256 over everything that can change the machine code or the way it links,
namely the contents of the sources and of the local headers they include, the flags, the ms_ext runtime, the
builder itself, the compilers, and the versions of torch (with its C++ ABI flag), MindSpore and nvcc. Each key gets
its own folder, so a rebuilt library has a new path: a process that already loaded the old one (dlopen caches
by path) is never handed a stale copy, and going back to an earlier source is a cache hit.

Layout (root = $AOT_OPS_CACHE or ~/.cache/aot_ops):
    <root>/<name>/.lock                 fcntl lock: one builder per name at a time
    <root>/<name>/build/                ninja's folder (objects, build.ninja, build.log): incremental rebuilds
    <root>/<name>/inline/<name>.cpp     the source given to load_inline, so compiler errors point at a real file
    <root>/<name>/<key>/lib<name>.so    published libraries, one folder per key, with entry.json
    <root>/<name>/last_build.json       what the latest build was made from, to explain the next rebuild
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from . import cuda, toolchain

KEY_LENGTH = 16  # hex digits of the sha256 used in folder names (64 bits: collisions are not a concern)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def cache_root() -> Path:
    """$AOT_OPS_CACHE, else $XDG_CACHE_HOME/aot_ops, else ~/.cache/aot_ops."""
    if os.environ.get("AOT_OPS_CACHE"):
        return Path(os.environ["AOT_OPS_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "aot_ops"


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ValueError(f"library name {name!r}: use letters, digits, '_', '.', '-' (it names files and folders)")
    return name


def name_dir(name: str) -> Path:
    return cache_root() / check_name(name)


# ---- what the sources depend on ------------------------------------------------------------------------------

_QUOTED = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
_ANGLED = re.compile(r'^\s*#\s*include\s*<([^>]+)>', re.M)
_TORCH_HEADERS = ("torch/", "ATen/", "c10/", "caffe2/")
_TORCH_FREE_MS_EXT = ("ms_ext/c_api.h",)


def local_headers(sources: Sequence[Path], include_paths: Sequence[Path],
                  texts: Mapping[Path, str] | None = None) -> list[Path]:
    """Headers the sources include from the user's own folders, recursively.

    `#include "x.h"` is looked up next to the including file, then in the extra include paths; `#include <x.h>`
    only in the extra include paths (system, torch and ms_ext headers are covered by their versions instead).
    Scanning text is much faster than asking the compiler (`-MM` would cost a compiler run on every cache hit)
    and errs on the safe side: an include inside `#if 0` is still hashed.
    """
    texts = dict(texts or {})
    found: list[Path] = []
    seen = {Path(s).resolve() for s in sources}
    pending = [Path(s).resolve() for s in sources]
    while pending:
        current = pending.pop()
        text = texts.get(current)
        if text is None:
            try:
                text = current.read_text(errors="replace")
            except OSError:
                continue
        candidates = [(name, [current.parent, *include_paths]) for name in _QUOTED.findall(text)]
        candidates += [(name, list(include_paths)) for name in _ANGLED.findall(text)]
        for name, folders in candidates:
            for folder in folders:
                path = (Path(folder) / name).resolve()
                if path.is_file():
                    if path not in seen:
                        seen.add(path)
                        found.append(path)
                        pending.append(path)
                    break
    return sorted(found)


def uses_torch(files: Iterable[Path], texts: Mapping[Path, str] | None = None) -> bool:
    """Whether any of the files includes torch, ATen, c10 or an ms_ext header that does (only ms_ext/c_api.h is
    plain C)."""
    texts = dict(texts or {})
    for path in files:
        text = texts.get(Path(path).resolve())
        if text is None:
            text = Path(path).read_text(errors="replace")
        for name in _ANGLED.findall(text) + _QUOTED.findall(text):
            if name.startswith(_TORCH_HEADERS):
                return True
            if name.startswith("ms_ext/") and name not in _TORCH_FREE_MS_EXT:
                return True
    return False


# ---- the key ------------------------------------------------------------------------------------------------

def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _tree_digest(paths: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(paths):
        digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def tool_identity(program: str | None) -> str:
    """The resolved path, size and mtime of a compiler binary.

    Stands in for its version in the key: `--version` would run the compiler on every cache hit, and a
    replaced or upgraded binary changes its size or mtime anyway. (The version text is recorded when building.)
    """
    if not program:
        return "missing"
    found = shutil.which(program) or program
    try:
        real = os.path.realpath(found)
        st = os.stat(real)
    except OSError:
        return f"missing:{program}"
    return f"{real}:{st.st_size}:{st.st_mtime_ns}"


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def describe(name: str, sources: Sequence[Path], use_torch: bool, extra_cflags: Sequence[str],
             extra_ldflags: Sequence[str], include_paths: Sequence[Path],
             texts: Mapping[Path, str] | None = None) -> dict:
    """Everything the library is made from, as a JSON-able dict; the key is its sha256.

    `texts` gives the contents of sources that are not written to disk yet (load_inline)."""
    texts = {Path(p).resolve(): t for p, t in (texts or {}).items()}
    sources = [Path(s).resolve() for s in sources]
    headers = local_headers(sources, include_paths, texts)

    def content(path: Path) -> str:
        return _sha256(texts[path].encode()) if path in texts else _sha256(path.read_bytes())

    has_cuda = any(cuda.is_cuda_source(s) for s in sources)
    versions = {"mindspore": _version("mindspore"), "python": f"{sys.version_info[0]}.{sys.version_info[1]}"}
    if use_torch:
        import torch  # the ABI flag is only known to the torch binary

        versions["torch"] = _version("torch") or torch.__version__
        versions["torch_cxx11_abi"] = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    tools = {"cxx": tool_identity(toolchain.cxx())}
    if any(s.suffix == ".c" for s in sources):
        tools["cc"] = tool_identity(toolchain.cc())
    flags = {"cflags": list(extra_cflags), "ldflags": list(extra_ldflags),
             "include_paths": [str(Path(p).resolve()) for p in include_paths], "use_torch": use_torch}
    if has_cuda:
        tools["nvcc"] = tool_identity(cuda.nvcc())
        flags["cuda_arch"] = cuda.arch_flags()
    ms_ext = toolchain.ms_ext_dir()
    return {
        "name": name,
        "sources": {str(s): content(s) for s in sources},
        "headers": {str(h): content(h) for h in headers},
        "flags": flags,
        "tools": tools,
        "versions": versions,
        "ms_ext": _tree_digest(p for p in ms_ext.rglob("*") if p.is_file() and p.suffix in (".h", ".cpp")),
        "builder": _tree_digest(Path(__file__).parent / f for f in _BUILDER_MODULES),
    }


# The modules that decide compiler commands and flags: editing them may change every library.
_BUILDER_MODULES = ("builder.py", "toolchain.py", "cuda.py")


def key_of(description: Mapping) -> str:
    return _sha256(json.dumps(description, sort_keys=True).encode())[:KEY_LENGTH]


def rebuild_reasons(previous: Mapping | None, current: Mapping) -> list[str]:
    """Why `current` differs from the last build of the same name, in words ("source changed: add.cpp")."""
    if not previous:
        return ["first build of this name"]
    reasons = []
    for kind, label in (("sources", "source"), ("headers", "header")):
        before, now = previous.get(kind, {}), current[kind]
        for path in sorted(set(before) | set(now)):
            if path not in before:
                reasons.append(f"{label} added: {Path(path).name}")
            elif path not in now:
                reasons.append(f"{label} removed: {Path(path).name}")
            elif before[path] != now[path]:
                reasons.append(f"{label} changed: {Path(path).name}")
    if previous.get("flags") != current["flags"]:
        reasons.append("flags changed")
    for tool, identity in current["tools"].items():
        if previous.get("tools", {}).get(tool) != identity:
            reasons.append(f"compiler changed: {tool}")
    for package, version in current["versions"].items():
        old = previous.get("versions", {}).get(package)
        if old != version:
            reasons.append(f"{package} changed: {old} -> {version}")
    if previous.get("ms_ext") != current["ms_ext"]:
        reasons.append("ms_ext runtime changed")
    if previous.get("builder") != current["builder"]:
        reasons.append("aot_ops builder changed")
    return reasons or ["library missing from the cache"]


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def write_json_atomically(path: Path, data: Mapping) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


# ---- listing and cleaning -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class CacheEntry:
    """One published library in the cache."""

    name: str
    key: str
    path: Path
    size: int
    built_at: float
    sources: tuple[str, ...]
    loadable: bool

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.built_at))
        state = "" if self.loadable else "  (compiled only)"
        return f"{self.name:<24} {self.key}  {when}  {self.size / 1024:8.0f} KiB  {self.path}{state}"


def entries(name: str | None = None) -> list[CacheEntry]:
    """Published libraries in the cache (all names, or one), oldest first."""
    root = cache_root()
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(root.iterdir()) if name is None else [name_dir(name)]:
        for entry_file in folder.glob("*/entry.json"):
            info = read_json(entry_file)
            if not info:
                continue
            library = entry_file.parent / info.get("library", "")
            size = library.stat().st_size if library.is_file() else 0
            found.append(CacheEntry(name=info.get("name", folder.name), key=entry_file.parent.name, path=library,
                                    size=size, built_at=info.get("built_at", entry_file.stat().st_mtime),
                                    sources=tuple(info.get("sources", ())), loadable=info.get("loadable", True)))
    return sorted(found, key=lambda e: e.built_at)


def clean(name: str | None = None) -> list[Path]:
    """Delete cached libraries and build folders (all names, or one) and return what was removed.

    Each name is cleaned while holding its build lock, so a build in progress is never cut from under itself.
    A process that already loaded a library keeps working: the kernel keeps unlinked files mapped.
    """
    from .lock import BuildLock

    root = cache_root()
    if not root.is_dir():
        return []
    folders = [name_dir(name)] if name is not None else [p for p in sorted(root.iterdir()) if p.is_dir()]
    removed = []
    for folder in folders:
        if not folder.is_dir():
            continue
        with BuildLock(folder / ".lock", f"cleaning {folder.name}"):
            for child in sorted(folder.iterdir()):
                if child.name == ".lock":
                    continue  # other processes may be waiting on this very file
                shutil.rmtree(child) if child.is_dir() else child.unlink()
                removed.append(child)
    return removed
