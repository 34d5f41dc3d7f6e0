"""Shared fixtures: MindSpore on CPU, both execution modes, and torch <-> MindSpore conversion."""
# Before the support modules are imported: their asserts are rewritten (and counted on request) like the tests'.
from assertion_count import (pytest_assertion_pass, pytest_configure, pytest_runtest_setup,  # noqa: F401
                             pytest_sessionfinish)

import os  # noqa: E402

# AOTInductor compiles a package's wrapper (the host code calling the kernels) at -O0 in the suite instead of torch's
# -O1 (its own setting; kernels stay at -O3): the same results, 23% less time for test_compiled's training tests
# (65 -> 50 s for four), a few seconds of g++ per compiled program. Read when torch's Inductor configuration is first
# imported, so set before anything imports torch; the worker processes and the tests' subprocesses inherit it. The
# setting is part of the package cache's key (compiled.py, _inductor_settings), so a benchmark run later with
# torch's default compiles its own packages.
os.environ.setdefault("AOT_INDUCTOR_COMPILE_WRAPPER_OPT_LEVEL", "O0")

import filelock  # noqa: E402  (a dependency of torch)
import mindspore as ms  # noqa: E402
import pytest  # noqa: E402

import gc_freeze  # noqa: E402
import scheduling  # noqa: E402
from support import MODE_IDS, MODES  # noqa: E402

ms.set_device("CPU")


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    scheduling.assign_groups(items)


@pytest.hookimpl(trylast=True)  # after xdist's hook has applied them
def pytest_collection_finish(session):
    scheduling.check_groups_applied(session.config, session.items)
    gc_freeze.after_collection()


@pytest.hookimpl(tryfirst=True)  # before the item's set-up (the last item's teardown is done)
def pytest_runtest_protocol(item, nextitem):
    gc_freeze.before_test(item)


@pytest.fixture(params=MODES, ids=MODE_IDS)
def mode(request):
    """Runs the test in PyNative and in GRAPH_MODE (PyNative alone in the quick loop)."""
    ms.set_context(mode=request.param)
    yield request.param
    ms.set_context(mode=ms.PYNATIVE_MODE)


def made_once_per_run(tmp_path_factory, name: str, make) -> str:
    """`make(folder)`'s result (a path, as text), made by the first worker process of this test run that needs it,
    in a folder all of the run's workers see; the others wait for it and read it. pytest-xdist's recipe: the
    workers' base temporary folders share a parent, private to the run."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder = root / f"made-once-{name}"
    with filelock.FileLock(f"{folder}.lock"):
        done = folder / ".result"
        if not done.is_file():
            folder.mkdir(exist_ok=True)
            done.write_text(make(folder))
        return done.read_text()


@pytest.fixture(scope="session")
def user_library(tmp_path_factory):
    """tests/kernels/user_ops.cpp built with `python -m aot_ops build` (once per test run, for every worker)."""
    from support import build_test_library

    return made_once_per_run(tmp_path_factory, "user_ops", lambda folder: build_test_library("user_ops.cpp", folder))


@pytest.fixture
def aot_cache(tmp_path, monkeypatch):
    """A private, empty aot_ops.load cache (AOT_OPS_CACHE), also inherited by subprocesses."""
    root = tmp_path / "aot_cache"
    monkeypatch.setenv("AOT_OPS_CACHE", str(root))
    return root


@pytest.fixture(scope="session")
def shared_ports():
    """Ported cells made once per worker and lent, reset to the test's module, to every test porting the same
    network, shapes and options (tests/shared_ports.py)."""
    from shared_ports import SharedPorts

    return SharedPorts()


@pytest.fixture
def graph_compiles(monkeypatch):
    """Every graph compilation MindSpore is asked for during the test (tests/graph_compiles.py)."""
    from graph_compiles import GraphCompiles

    recorder = GraphCompiles()
    recorder.install(monkeypatch)
    return recorder
