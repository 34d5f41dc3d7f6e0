"""The build cache holds code that aot_ops loads (libraries, generated Cells): only this user may control it.

A library found in the cache is dlopened and its constructors run as the user who loads it, so a cache another
user can write is a way to run their code as you. Every folder aot_ops uses in the cache is therefore
- created with mode 0700;
- when it exists, a real folder (not a symbolic link), owned by this user, and not writable by others (a folder of
  this user's with looser permissions is tightened to 0700);
- reached through folders that others cannot rename entries in (their own permissions, or the sticky bit of /tmp).
Files are used only when they are regular files owned by this user and writable by nobody else; a published
library must also still have the sha256 recorded when it was built. Anything else is refused with a message
that names the path and what is wrong.
"""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from ..errors import Error


class UnsafeCacheError(Error, PermissionError):
    """A cache folder or file that another user could control."""


def _refuse(path: Path, why: str) -> UnsafeCacheError:
    return UnsafeCacheError(f"aot_ops cache: {path} {why}; aot_ops loads code from its cache and only uses folders "
                            "and files that only you control (set AOT_OPS_CACHE to a folder of your own)")


def _owner_ok(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid()


def check_ancestors(root: Path) -> None:
    """Folders above the cache must not let others replace it: not writable by group or others, unless sticky."""
    for folder in Path(os.path.abspath(root)).parents:
        try:
            st = os.stat(folder)
        except FileNotFoundError:
            continue
        writable_by_others = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable_by_others and not st.st_mode & stat.S_ISVTX and st.st_uid != os.geteuid():
            raise _refuse(folder, "is writable by other users (and not sticky), who could replace the cache in it")


def _check_owned(path: Path, st: os.stat_result, is_kind, kind: str) -> None:
    """A real `kind` (not a symbolic link to one) that belongs to this user."""
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "is a symbolic link")
    if not is_kind(st.st_mode):
        raise _refuse(path, f"is not a {kind}")
    if not _owner_ok(st):
        raise _refuse(path, f"belongs to another user (uid {st.st_uid})")


def private_dir(path: Path) -> Path:
    """`path` as a folder only this user controls (created 0700 when missing, with its missing parents)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if not path.parent.exists():
            private_dir(path.parent)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # another process made it meanwhile: checked below
        st = os.lstat(path)
    _check_owned(path, st, stat.S_ISDIR, "folder")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, 0o700)  # ours: tighten (an earlier version or the umask made it group-readable)
    return path


def why_unsafe(root: Path) -> str | None:
    """What aot_ops would refuse about the cache folder `root` (None: nothing), without changing anything."""
    try:
        check_ancestors(root)
        st = os.lstat(root)
    except FileNotFoundError:
        return None  # created private on first use
    except UnsafeCacheError as exc:
        return str(exc)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return f"{root} is not a real folder"
    if not _owner_ok(st):
        return f"{root} belongs to another user (uid {st.st_uid})"
    return None


def check_file(path: Path) -> Path:
    """A regular file of this user's that nobody else can write (not a symbolic link)."""
    st = os.lstat(path)
    _check_owned(path, st, stat.S_ISREG, "regular file")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _refuse(path, "is writable by other users")
    return path


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_published(path: Path, recorded_sha256: str | None) -> Path:
    """A library about to be loaded: ours, and still what was built (its sha256 as recorded at publish time)."""
    check_file(path)
    if recorded_sha256 is None:
        raise _refuse(path, "has no recorded sha256 (published by another version of aot_ops, or not by aot_ops); "
                            "clean it with `python -m aot_ops cache clean`")
    if file_sha256(path) != recorded_sha256:
        raise _refuse(path, "changed after it was built (its sha256 differs from the one recorded); clean it with "
                            "`python -m aot_ops cache clean`")
    return path
