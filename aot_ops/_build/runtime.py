"""ms_ext's C runtime, compiled once at install time and linked into every library built after.

Every aot library links the same six runtime units (toolchain.ms_ext_runtime_sources: the AotExtra mirror, the
error slot, the guarded call, kernel states, the memory probe, the attribute table). They are compiled with fixed
flags, never the user's, so the objects are the same for every library: compiling them again took about 7 s of a
user's 15-20 s kernel build. setup.py compiles them next to the bundled libraries (aot_ops/lib/ms_ext_runtime);
a library built later links those objects when the record beside them still describes what would be compiled now
(the compiler binary, the flags, the content of every ms_ext source and header), and compiles its own otherwise
(an edited ms_ext, another compiler through CXX).
"""
from __future__ import annotations

import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Sequence

from .._native.paths import LIB_DIR
from . import toolchain

log = logging.getLogger("aot_ops.build")

RUNTIME_DIR = LIB_DIR / "ms_ext_runtime"
RECORD = "runtime.json"


def units() -> list[tuple[Path, list[str]]]:
    """(source, flags) of each runtime unit, in link order."""
    sources = toolchain.ms_ext_runtime_sources()
    return ([(src, toolchain.abi0_cflags()) for src in sources["abi0"]] +
            [(src, toolchain.plain_cflags()) for src in sources["plain"]])


def description() -> dict:
    """What the objects depend on. Paths are relative to ms_ext's folder: a wheel compiles its copy of ms_ext in
    a temporary build folder and installs it elsewhere, and the objects stay valid."""
    from .cache import tool_identity

    ms_ext = toolchain.ms_ext_dir()
    digest = hashlib.sha256()
    for path in sorted(p for p in ms_ext.rglob("*") if p.is_file() and p.suffix in (".h", ".cpp")):
        digest.update(path.relative_to(ms_ext).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    here = str(ms_ext)
    return {"cxx": tool_identity(toolchain.cxx()),
            "units": [[src.relative_to(ms_ext).as_posix(), [f.replace(here, "<ms_ext>") for f in flags]]
                      for src, flags in units()],
            "ms_ext": digest.hexdigest()}


def prebuilt(folder: Path = RUNTIME_DIR) -> list[Path] | None:
    """The installed runtime objects, or None when they are missing or were compiled from something else."""
    record = folder / RECORD
    try:
        recorded = json.loads(record.read_text())
    except (OSError, ValueError):
        return None
    if recorded.get("description") != description():
        log.debug("ms_ext runtime in %s does not match this ms_ext and compiler: compiled with the library", folder)
        return None
    objects = [folder / name for name in recorded.get("objects", [])]
    return objects if objects and all(o.is_file() for o in objects) else None


def install(objects: Sequence[Path], folder: Path) -> list[Path]:
    """Copies compiled runtime objects into `folder` with the record that says what they were compiled from (the
    record last: a reader never trusts objects still being copied)."""
    folder = folder.resolve()  # the libraries' ninja files name them from their own build folders
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RECORD).unlink(missing_ok=True)
    installed = []
    for obj in objects:
        target = folder / obj.name
        shutil.copyfile(obj, target)
        installed.append(target)
    tmp = folder / f".{RECORD}.tmp"
    tmp.write_text(json.dumps({"description": description(), "objects": [o.name for o in installed]}, indent=1))
    tmp.replace(folder / RECORD)
    return installed
