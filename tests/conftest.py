"""Shared fixtures: MindSpore on CPU, both execution modes, and torch <-> MindSpore conversion."""
import mindspore as ms
import pytest

from support import MODES

ms.set_device("CPU")


@pytest.fixture(params=MODES, ids=["pynative", "graph"])
def mode(request):
    """Runs the test in PyNative and in GRAPH_MODE."""
    ms.set_context(mode=request.param)
    yield request.param
    ms.set_context(mode=ms.PYNATIVE_MODE)
