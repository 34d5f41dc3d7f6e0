"""Shared fixtures: MindSpore on CPU, both execution modes, and torch <-> MindSpore conversion."""
import mindspore as ms
import pytest

from support import MODE_IDS, MODES

ms.set_device("CPU")

# Worker processes take whole files in collection order (--dist loadfile), so a long file collected last runs
# alone at the end while the other workers idle. These files take minutes (building a wheel and a venv, nvcc,
# the fuzz campaign, many exports, AOTInductor compiling); starting them first, longest first, lets the short
# files fill in around them.
LONG_FILES_FIRST = (
    "test_compiled.py",
    "test_wheel.py",
    "test_cuda.py",
    "test_zoo.py",
    "test_fuzz.py",
    "test_threads.py",
    "test_conformance.py",
    "test_transformers_use.py",
    "test_data_parallel.py",
    "test_examples.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FILES_FIRST)}
    # sort is stable: files not listed keep their order, after the listed ones, and tests keep theirs in a file.
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(params=MODES, ids=MODE_IDS)
def mode(request):
    """Runs the test in PyNative and in GRAPH_MODE (PyNative alone in the quick loop)."""
    ms.set_context(mode=request.param)
    yield request.param
    ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.fixture(scope="session")
def user_library(tmp_path_factory):
    """tests/kernels/user_ops.cpp built with `python -m aot_ops build` (once per test session)."""
    from support import build_test_library

    return build_test_library("user_ops.cpp", tmp_path_factory.mktemp("user_ops"))


@pytest.fixture
def aot_cache(tmp_path, monkeypatch):
    """A private, empty aot_ops.load cache (AOT_OPS_CACHE), also inherited by subprocesses."""
    root = tmp_path / "aot_cache"
    monkeypatch.setenv("AOT_OPS_CACHE", str(root))
    return root
