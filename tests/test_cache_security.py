"""The build cache holds code aot_ops loads: folders and libraries someone else controls are refused.

Also: MindSpore's MS_CUSTOM_AOT_WHITE_LIST is honoured before any library is loaded, and odd characters in source
paths reach ninja escaped.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import aot_ops
from aot_ops._build.private import UnsafeCacheError

TWICE = r'''
#include <cstdint>
extern "C" int Twice(int, void **p, int *nd, int64_t **sh, const char **, void *, void *) {
  int64_t n = 1; for (int d = 0; d < nd[0]; ++d) n *= sh[0][d];
  for (int64_t i = 0; i < n; ++i) ((float *)p[1])[i] = 2 * ((float *)p[0])[i];
  return 0;
}
'''
OTHER_UID = 4242  # a user that is not us
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="making files owned by another user needs root")


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_cache_folders_are_created_private(aot_cache):
    lib = aot_ops.load_inline("private_twice", TWICE)
    for folder in (aot_cache, aot_cache / "private_twice", lib.path.parent, aot_cache / "private_twice" / "build"):
        assert mode_of(folder) == 0o700, folder


def test_our_loose_cache_folder_is_tightened(aot_cache):
    aot_cache.mkdir(mode=0o777)
    os.chmod(aot_cache, 0o777)
    aot_ops.load_inline("loose_twice", TWICE)
    assert mode_of(aot_cache) == 0o700


@needs_root
def test_cache_owned_by_another_user_is_refused(aot_cache):
    aot_cache.mkdir()
    os.chown(aot_cache, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeCacheError, match=rf"{aot_cache} belongs to another user \(uid {OTHER_UID}\)"):
        aot_ops.load_inline("theirs_twice", TWICE)


@needs_root
def test_cache_inside_another_users_open_folder_is_refused(tmp_path, monkeypatch):
    """Whoever can write the folder holding the cache can swap the cache itself."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    os.chown(shared, OTHER_UID, OTHER_UID)
    monkeypatch.setenv("AOT_OPS_CACHE", str(shared / "cache"))
    with pytest.raises(UnsafeCacheError, match=rf"{shared} is writable by other users \(and not sticky\)"):
        aot_ops.load_inline("shared_twice", TWICE)


def test_planted_symlink_is_refused(aot_cache, tmp_path):
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir()
    aot_cache.mkdir(mode=0o700)
    (aot_cache / "linked_twice").symlink_to(elsewhere)
    with pytest.raises(UnsafeCacheError, match=r"linked_twice is a symbolic link"):
        aot_ops.load_inline("linked_twice", TWICE)
    assert not any(elsewhere.iterdir())  # nothing was built or loaded there


@needs_root
def test_swapped_name_folder_is_refused(aot_cache):
    first = aot_ops.load_inline("swapped_twice", TWICE)
    folder = aot_cache / "swapped_twice"
    stolen = aot_cache / "stolen"
    folder.rename(stolen)
    shutil.copytree(stolen, folder)  # the same content, now another user's
    for path in [folder, *folder.rglob("*")]:
        os.lchown(path, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeCacheError, match=r"swapped_twice belongs to another user"):
        aot_ops.load_inline("swapped_twice", TWICE)
    assert first.path.is_file()


def test_library_changed_after_publishing_is_refused(aot_cache):
    lib = aot_ops.load_inline("tampered_twice", TWICE)
    data = bytearray(lib.path.read_bytes())
    data[-1] ^= 0xFF
    lib.path.write_bytes(bytes(data))
    with pytest.raises(UnsafeCacheError, match=r"libtampered_twice.so changed after it was built"):
        aot_ops.load_inline("tampered_twice", TWICE)


def test_planted_entry_without_a_recorded_hash_is_refused(aot_cache):
    lib = aot_ops.load_inline("planted_twice", TWICE)
    entry = lib.path.parent / "entry.json"
    info = json.loads(entry.read_text())
    del info["sha256"]
    entry.write_text(json.dumps(info))
    with pytest.raises(UnsafeCacheError, match=r"has no recorded sha256"):
        aot_ops.load_inline("planted_twice", TWICE)


@needs_root
def test_file_owned_by_another_user_is_refused(aot_cache):
    lib = aot_ops.load_inline("owned_twice", TWICE)
    os.chown(lib.path, OTHER_UID, OTHER_UID)
    with pytest.raises(UnsafeCacheError, match=r"libowned_twice.so belongs to another user"):
        aot_ops.load_inline("owned_twice", TWICE)


def test_dollar_space_and_colon_in_source_paths(aot_cache, tmp_path):
    folder = tmp_path / "odd $dir x:y"
    folder.mkdir()
    (folder / "twice.cpp").write_text(TWICE)
    lib = aot_ops.load("odd_path_twice", [folder / "twice.cpp"])
    assert lib.path.is_file()


WHITE_LIST_CASE = '''
import os, sys
import aot_ops
from aot_ops._native import opener as _clib
try:
    {call}
    print("RESULT ok")
except PermissionError as exc:
    print("RESULT refused:", exc)
maps = open("/proc/self/maps").read()
print("LOADED", "libaot_ops_cpu.so" in maps)
'''


@pytest.mark.parametrize("call", [
    "aot_ops.leaky_relu()",
    "aot_ops.harness.call(aot_ops.library_path(), 'Gelu', [], [])",
    "aot_ops.last_error(aot_ops.library_path())",
    "import aot_ops.cuda; aot_ops.cuda.load_torch_op(aot_ops.library_path())",
], ids=["operator", "harness", "runtime", "torch_operator"])
def test_white_list_is_honoured_before_any_load(call, tmp_path):
    env = dict(os.environ, MS_CUSTOM_AOT_WHITE_LIST=str(tmp_path))
    script = tmp_path / "case.py"
    script.write_text(WHITE_LIST_CASE.format(call=call))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"is outside MS_CUSTOM_AOT_WHITE_LIST={tmp_path}" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "LOADED False" in proc.stdout


def test_white_list_keeps_builds_out_of_other_folders(aot_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("MS_CUSTOM_AOT_WHITE_LIST", str(tmp_path / "allowed"))
    with pytest.raises(PermissionError, match=r"is outside MS_CUSTOM_AOT_WHITE_LIST"):
        aot_ops.load_inline("white_listed_twice", TWICE)
    assert not list(aot_cache.rglob("*.so"))
    monkeypatch.setenv("MS_CUSTOM_AOT_WHITE_LIST", str(aot_cache))
    assert aot_ops.load_inline("white_listed_twice", TWICE).path.is_file()
