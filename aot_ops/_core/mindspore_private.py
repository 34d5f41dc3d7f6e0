"""The MindSpore internals aot_ops relies on, in one place. Each is private API, checked on MindSpore 2.10; a
MindSpore upgrade that changes one breaks this module, and the tests named beside it say so.
"""
from __future__ import annotations

import os
import time

from mindspore.graph.api import _pynative_executor


# recording_gradients() -> bool: whether PyNative is recording operators for a gradient (inside ms.grad's
# forward). Without it the PyNative front would run inside a gradient, which MindSpore's autodiff would not see
# (tests/test_front.py). The executor's own method, not a wrapper: every eager AotOp call asks it.
recording_gradients = _pynative_executor.requires_grad


def wait_for_queued_work() -> None:
    """Returns once every operator PyNative queued so far has run. PyNative launches on runtime threads behind the
    caller: a launch counter read right after a call may not count it yet, nor the calls of an earlier test whose
    results nobody read. The public ms.runtime.synchronize() does not do this on CPU: MindSpore 2.10 logs "CPU
    device is not supported" as an ERROR at its first call and returns (tests/test_front.py's counts, and
    weights.py before it overwrites a Parameter's memory)."""
    _pynative_executor.sync()


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


def jit_phases(module: str, cell_id: int) -> set[str]:
    """The graphs ms.jit compiled for the Cell of `cell_id` whose construct is defined in `module`. MindSpore 2.10
    keys them in `ms_compile_cache` by a phase naming the construct's module, the Cell's creation time and
    id(cell), and never frees them when the Cell goes: each held the Cell's Parameters (its weights) and its
    kernels for the rest of the process. Every creation time of the Cell counts (see recompile_on_next_call).
    Reads a Python set only: safe anywhere, a collector's callback included."""
    from mindspore.graph.api import ms_compile_cache

    marker, prefix = f".{cell_id}.", module + "."
    return {phase for phase in list(ms_compile_cache) if phase.startswith(prefix) and marker in phase}


def free_jit_phases(phases: set[str]) -> int:
    """Frees those graphs, as ms.ms_memory_recycle() frees every graph; the number freed. It takes MindSpore's
    graph executor, so it must not run where MindSpore may be waiting: not on one of its kernel threads (a Python
    kernel's allocation that started a garbage collection ran it there, and the process hung), nor inside a call
    (aot_ops/_port/cells/graph_entry.py: CollectedGraphs decides when)."""
    from mindspore._c_expression import JitExecutor_
    from mindspore.graph.api import _cell_graph_executor, ms_compile_cache

    phases = phases & ms_compile_cache
    if phases:
        _cell_graph_executor.del_net_res(None, phases)
        if os.getenv("MS_DEV_JIT_PIPELINE") != "0":
            JitExecutor_.get_instance().del_net_res(None, phases)
        ms_compile_cache.difference_update(phases)
    return len(phases)


def run_compiled_graph(cell, args: tuple):
    """The graph GRAPH_MODE compiled for `cell` in its current phase, run with `args` as Cell.__call__ runs it
    once compiled; None where there is none yet (the first call, a phase not compiled, a new creation time:
    recompile_on_next_call), and the caller then calls the Cell. Skipped: Cell.__call__'s argument binding and
    checks and compile(), which finds the graph already there (0.5-0.9 ms of a 4 ms decoding step,
    docs/performance.md). MindSpore keys the graph on the Cell's `arguments_key` of its last compile; the caller
    must pass arguments of the signature compiled (PortedCell checks every input's rank, sizes and dtype against
    its port, and a ported cell's signature is fixed: its dynamic dimensions are declared with set_inputs).
    Checked by every GRAPH_MODE test that calls a ported cell twice (tests/test_from_torch.py)."""
    from mindspore.graph.api import _cell_graph_executor, _real_phase

    if getattr(cell, "arguments_key", None) is None:
        return None
    phase = _real_phase(cell.phase, cell)
    if not _cell_graph_executor.has_compiled(phase):
        return None
    return _cell_graph_executor._exec_pip(cell, *args, phase=phase)


def run_as_called_cell(cell, run, args: tuple):
    """`run(*args)` (a cell's ms.jit graph) wrapped in what Cell.__call__ does around construct when MindSpore's
    autodiff may differentiate the call (the cell under ms.grad, `requires_grad`; dynamic-shape inputs; mixed
    precision): `_call_pre_process`/`_call_post_process` make the cell autodiff's top cell, whose graph grad then
    differentiates. Without them ms.grad of a ported cell in PyNative fails or gives no gradient
    (tests/test_pynative_graph.py, tests/test_from_torch.py's PyNative training)."""
    if not (cell.requires_grad or cell._dynamic_shape_inputs is not None or cell.mixed_precision_type is not None):
        return run(*args)
    cell._call_pre_process(*args)
    output = run(*args)
    cell._call_post_process(output, *args)
    return output


class KeepsCompilePhase:
    """A Cell mixin for cells that never run as a graph of their own (the module tree, a graph's operators):
    MindSpore sets `compile_phase` on every cell of a network at every GRAPH_MODE call, each through
    Cell.__setattr__'s checks (a ported BERT's 78 cells cost about as much as its forward program); this keeps the
    value without passing it on. Without it nothing fails: GRAPH_MODE calls of ported cells get slower
    (docs/performance.md)."""

    @property
    def compile_phase(self):
        return self.__dict__.get("_compile_phase")

    @compile_phase.setter
    def compile_phase(self, value):
        self.__dict__["_compile_phase"] = value
