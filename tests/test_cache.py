"""The build cache of aot_ops.load: rebuild exactly when something changed, never hang on a dead builder, and
build once however many processes ask at the same time."""
from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import aot_ops
from aot_ops._build import lock as build_lock
from aot_ops._build.lock import BuildLock
from loader_support import (LOAD_AND_CALL, REPO, compiled_sources, compiler_wrapper, env_with, python,
                            write_plain_add)


def finish(proc: subprocess.Popen, timeout: float = 120) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])


def test_second_load_in_a_new_process_runs_no_compiler(aot_cache, tmp_path):
    source = write_plain_add(tmp_path / "src")
    wrapper, log = compiler_wrapper(tmp_path / "bin")
    env = env_with(CXX=wrapper)
    first = finish(python(LOAD_AND_CALL, "plain_add", source, env=env))
    compiles = log.read_text().count("\n")
    assert first["rebuilt"] and first["out"] == [11.0, 22.0, 33.0]
    assert compiled_sources(log, "plain_add.cpp") == 1

    second = finish(python(LOAD_AND_CALL, "plain_add", source, env=env))
    assert not second["rebuilt"] and second["out"] == [11.0, 22.0, 33.0]
    assert log.read_text().count("\n") == compiles, "the compiler ran on a cache hit"
    assert second["path"] == first["path"]
    assert second["seconds"] < 1.0, f"warm load took {second['seconds']:.2f}s"
    # a plain C++ kernel needs neither torch nor MindSpore to be built or loaded
    assert not second["torch_imported"] and not second["mindspore_imported"]


@pytest.mark.slow  # processes building, killed or waiting on the build lock
def test_four_processes_loading_a_new_source_build_it_once(aot_cache, tmp_path):
    source = write_plain_add(tmp_path / "src")
    wrapper, log = compiler_wrapper(tmp_path / "bin")
    env = env_with(CXX=wrapper)
    procs = [python(LOAD_AND_CALL, "plain_add", source, env=env) for _ in range(4)]
    results = [finish(p) for p in procs]
    assert all(r["out"] == [11.0, 22.0, 33.0] for r in results)
    assert sum(r["rebuilt"] for r in results) == 1
    assert compiled_sources(log, "plain_add.cpp") == 1
    assert len({r["path"] for r in results}) == 1


@pytest.mark.slow  # processes building, killed or waiting on the build lock
def test_builder_killed_mid_build_does_not_block_the_next_build(aot_cache, tmp_path):
    source = write_plain_add(tmp_path / "src")
    wrapper, log = compiler_wrapper(tmp_path / "bin")
    started = tmp_path / "compiling"
    victim = python(LOAD_AND_CALL, "plain_add", source, start_new_session=True,
                    env=env_with(CXX=wrapper, AOT_TEST_SLOW_SOURCE="plain_add.cpp", AOT_TEST_STARTED=started))
    deadline = time.monotonic() + 60
    while not started.exists():  # the victim holds the lock and is inside the compiler
        assert victim.poll() is None and time.monotonic() < deadline, victim.communicate()[1][-2000:]
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)  # builder, ninja and compiler die together, as with a Ctrl-\ or OOM
    victim.wait()

    start = time.monotonic()
    after = finish(python(LOAD_AND_CALL, "plain_add", source, env=env_with(CXX=wrapper)), timeout=60)
    assert after["rebuilt"] and after["out"] == [11.0, 22.0, 33.0]
    assert time.monotonic() - start < 30
    assert (aot_cache / "plain_add" / ".lock").exists()  # the file stays; only the kernel's lock died with it


@pytest.mark.slow  # processes building, killed or waiting on the build lock
def test_waiting_for_the_lock_says_why(aot_cache, caplog, monkeypatch):
    monkeypatch.setattr(build_lock, "NOTICE_AFTER_S", 0.2)
    path = aot_cache / "busy" / ".lock"
    holder = BuildLock(path, "test holder").__enter__()
    waited = threading.Event()

    def wait_for_lock():
        with BuildLock(path, "the build of busy"):
            waited.set()

    with caplog.at_level(logging.WARNING, logger="aot_ops.build"):
        thread = threading.Thread(target=wait_for_lock)
        thread.start()
        time.sleep(0.6)
        assert not waited.is_set()
        holder.__exit__(None, None, None)
        thread.join(5)
    assert waited.is_set()
    assert f"waiting for the build of busy: another process (pid {os.getpid()}) holds {path}" in caplog.text


def build_reasons(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("building ")]


def test_unchanged_sources_are_not_rebuilt(aot_cache, tmp_path, caplog):
    source = write_plain_add(tmp_path / "src")
    assert aot_ops.load("plain_add", [source]).rebuilt
    with caplog.at_level(logging.INFO, logger="aot_ops.build"):
        again = aot_ops.load("plain_add", [source])
    assert not again.rebuilt
    assert build_reasons(caplog) == [] and "cache hit: plain_add" in caplog.text


def test_editing_the_source_rebuilds(aot_cache, tmp_path, caplog):
    source = write_plain_add(tmp_path / "src")
    first = aot_ops.load("plain_add", [source])
    source.write_text(source.read_text() + "\n// edited\n")
    with caplog.at_level(logging.INFO, logger="aot_ops.build"):
        second = aot_ops.load("plain_add", [source])
    assert second.rebuilt and second.path != first.path
    assert build_reasons(caplog) == ["building plain_add: source changed: plain_add.cpp"]


def test_editing_an_included_local_header_rebuilds(aot_cache, tmp_path, caplog):
    source = write_plain_add(tmp_path / "src")
    aot_ops.load("plain_add", [source])
    header = tmp_path / "src" / "add_loop.h"
    header.write_text(header.read_text().replace("a[i] + b[i]", "a[i] + b[i] + 1"))
    with caplog.at_level(logging.INFO, logger="aot_ops.build"):
        lib = aot_ops.load("plain_add", [source])
    assert lib.rebuilt
    assert build_reasons(caplog) == ["building plain_add: header changed: add_loop.h"]


def test_changing_flags_rebuilds_and_going_back_is_a_cache_hit(aot_cache, tmp_path, caplog):
    source = write_plain_add(tmp_path / "src")
    plain = aot_ops.load("plain_add", [source])
    with caplog.at_level(logging.INFO, logger="aot_ops.build"):
        defined = aot_ops.load("plain_add", [source], extra_cflags=["-DFAST=1"])
    assert defined.rebuilt and "flags changed" in build_reasons(caplog)[0]
    back = aot_ops.load("plain_add", [source])
    assert not back.rebuilt and back.path == plain.path


def test_cache_list_and_clean(aot_cache, tmp_path):
    source = write_plain_add(tmp_path / "src")
    lib = aot_ops.load("plain_add", [source])
    assert [e.path for e in aot_ops.cache_entries()] == [lib.path]
    listing = subprocess.run([sys.executable, "-m", "aot_ops", "cache", "list"], cwd=REPO, capture_output=True,
                             text=True)
    assert listing.returncode == 0 and str(lib.path) in listing.stdout and "1 libraries" in listing.stdout
    cleaned = subprocess.run([sys.executable, "-m", "aot_ops", "cache", "clean", "plain_add"], cwd=REPO,
                             capture_output=True, text=True)
    assert cleaned.returncode == 0, cleaned.stderr
    assert aot_ops.cache_entries() == [] and not lib.path.exists()
    assert aot_ops.load("plain_add", [source]).rebuilt


def test_cache_location_follows_aot_ops_cache(aot_cache):
    assert aot_ops.cache_dir() == aot_cache


@pytest.mark.parametrize("name", ["../escape", "a b", ""])
def test_library_names_that_are_not_file_names_are_refused(aot_cache, tmp_path, name):
    with pytest.raises(ValueError, match="library name"):
        aot_ops.load(name, [write_plain_add(tmp_path / "src")])
