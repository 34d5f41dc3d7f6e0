"""The MindSpore internals aot_ops relies on, in one place (each is private API: a MindSpore upgrade that changes
one breaks this module alone, and tests/test_front.py and tests/test_train_step.py say so)."""
from __future__ import annotations

from mindspore.graph.api import _pynative_executor


def recording_gradients() -> bool:
    """Whether PyNative is recording operators for a gradient (inside ms.grad's forward)."""
    return _pynative_executor.requires_grad()


def end_aborted_gradient() -> None:
    """After an exception escaped a gradient's forward: MindSpore 2.10 keeps recording every later PyNative
    operator for that gradient (requires_grad() stays True, even after later gradients succeed), so eager calls
    lose the fast front and keep their inputs alive. Clearing the executor's gradient state ends the recording;
    compiled graphs (ms.jit, train_step) are kept."""
    if _pynative_executor.requires_grad():
        _pynative_executor.clear_res()
