"""Port results kept in the build cache between processes, as pickles: <cache>/<kind>/<key>.pkl.

Two kinds use it: AOTAutograd's fused programs, kept by exported graph (fused_cache.py), and a checkpoint's whole
port plan, kept by what the model is built from (plan_cache.py). Both rules are here once: a pickle runs code when
it is loaded, so only a regular file of this user's is read (UnsafeCacheError otherwise, as for every file of the
cache); a truncated entry (a full disk) is a logged miss, made again; a failed write leaves the port its result.
Every key covers aot_ops' own source (`package_digest`), so a change to the package never reads an older entry.
AOT_OPS_PORT_CACHE=0 turns both off (`enabled`). Each kind keeps its `LIMIT` most recently used files (a read
marks a file used): 1-2.5 MB per model (a 22-layer Llama's training programs, a 7.6B Qwen2's plan), so the cache
stays within a few hundred MB however many models are ported.
"""
from __future__ import annotations

import logging
import os
import pickle
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..._build import cache, private

log = logging.getLogger(__name__)

LIMIT = 200  # files kept per kind
TORCH_NAMESPACES = ("aten", "prims")  # operators torch defines: the same in every process (others are not kept)


def enabled() -> bool:
    return os.environ.get("AOT_OPS_PORT_CACHE", "1") != "0"


def entry(kind: str, key: str) -> Path:
    """The file of `key` among the kept entries of `kind` (its folder created private)."""
    return private.private_dir(cache.private_root() / kind) / f"{key}.pkl"


def read(path: Path) -> Any | None:
    """The value kept at `path`, or None when there is none or it is truncated."""
    if not os.path.lexists(path):
        return None
    private.check_file(path)
    try:
        with open(path, "rb") as f:
            value = pickle.load(f)
        os.utime(path)  # used: the last to go
        return value
    except (EOFError, pickle.UnpicklingError) as exc:
        log.warning("ignoring the kept entry %s (%s: %s); making it again", path, type(exc).__name__, exc)
        return None


def write(path: Path, value: Any) -> None:
    try:
        cache.write_bytes_atomically(path, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        _forget_least_used(path.parent)
    except OSError as exc:  # a full or read-only cache: the port still has its result
        log.warning("could not keep %s: %s", path, exc)


def _forget_least_used(folder: Path) -> None:
    """Removes the kind's least recently used files beyond LIMIT (another process may remove them first)."""
    entries = []
    for path in folder.glob("*.pkl"):
        try:
            entries.append((path.stat().st_mtime, path))
        except FileNotFoundError:
            continue
    for _, path in sorted(entries, reverse=True)[LIMIT:]:
        path.unlink(missing_ok=True)


def functorch_settings() -> str:
    """AOTAutograd's portable settings, which change what it traces (in both kinds' keys)."""
    from ..._core.torch_private import functorch_config
    from .compiled import portable_settings

    return portable_settings(functorch_config())


@lru_cache(maxsize=1)
def package_digest() -> str:
    """The source of aot_ops (every Python module of the package, the ATen bridge's argument kinds among them,
    which a kept plan pickles): the code that makes what is kept."""
    root = Path(__file__).resolve().parents[2]
    return cache._tree_digest(p for p in root.rglob("*.py"))
