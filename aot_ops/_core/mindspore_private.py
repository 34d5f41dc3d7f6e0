"""The MindSpore internals aot_ops relies on, in one place. Each is private API, checked on MindSpore 2.10; a
MindSpore upgrade that changes one breaks this module, and the tests named beside it say so.
"""
from __future__ import annotations

import time

from mindspore.graph.api import _pynative_executor


# recording_gradients() -> bool: whether PyNative is recording operators for a gradient (inside ms.grad's
# forward). Without it the PyNative front would run inside a gradient, which MindSpore's autodiff would not see
# (tests/test_front.py). The executor's own method, not a wrapper: every eager AotOp call asks it.
recording_gradients = _pynative_executor.requires_grad


def end_aborted_gradient() -> None:
    """After an exception escaped a gradient's forward: MindSpore 2.10 keeps recording every later PyNative
    operator for that gradient (requires_grad() stays True, even after later gradients succeed), so eager calls
    lose the fast front and keep their inputs alive. Clearing the executor's gradient state ends the recording;
    compiled graphs (ms.jit, train_step) are kept. Without it eager calls stay off the front
    (tests/test_front.py, tests/test_conformance.py)."""
    if _pynative_executor.requires_grad():
        _pynative_executor.clear_res()


def recompile_on_next_call(cell) -> None:
    """After a kernel failed, MindSpore 2.10 fails every later run of that compiled graph with an empty
    RuntimeError (built-in operators too). MindSpore keys a Cell's compiled graphs on its creation time: a new
    one gives the next call a freshly compiled graph (tests/test_from_torch.py: calls after a failed step work)."""
    object.__setattr__(cell, "_create_time", time.time_ns())


def has_hooks(cell) -> bool:
    """Whether hooks are registered on the Cell (register_forward_pre_hook, register_forward_hook,
    register_backward_hook), which a compiled graph entry would skip (tests/test_pynative_graph.py)."""
    return bool(cell._forward_pre_hook or cell._forward_hook or cell._backward_hook)
