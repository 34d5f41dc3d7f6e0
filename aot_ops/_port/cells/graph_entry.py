"""How a call from Python enters a ported cell as a compiled MindSpore graph.

- GRAPH_MODE: MindSpore compiles the Cell called (the ported cell, or its flat twin when the outputs hold dicts);
  once compiled, the ported cell runs that graph directly (_core/mindspore_private.py: run_compiled_graph).
- PyNative: the same cell as one `ms.jit` graph (from_torch's default jit=True), forward and backward. PyNative
  otherwise runs every operator through MindSpore's asynchronous queues, whose threads wait for work by spinning;
  on a machine with few cores they take the CPU from the thread that runs the kernels, and a plain training loop
  on a ported cell took 4-22x torch eager's step, changing from run to run (docs/performance.md).

MindSpore keys a compiled graph on the Cell's `create_time` and `phase`. set_train sets the phase of the cell it is
called on only (a parent's set_train changes `training` alone, and the flat twin is nobody's child), so the phase
of the cell compiled is brought in step with `training` before every call: otherwise a call after a switch ran the
graph compiled for the other mode. A new create_time (PortedCell._forget_compiled_graphs) compiles afresh.

MindSpore frees the graphs it compiled for a Cell in GRAPH_MODE when the Cell goes (Cell.__del__), but not those
ms.jit compiled for it: each kept the Cell's Parameters and kernels (a dropped 100 MB cell stayed in memory). A
PyNativeGraph frees its target's when the target is collected, at once where that is safe, else at the next safe
point (COLLECTED_GRAPHS).
"""
from __future__ import annotations

import contextlib
import threading
import weakref

import mindspore as ms
from mindspore import nn

from ..._core.mindspore_private import free_jit_phases, jit_phases, run_as_called_cell


class CollectedGraphs:
    """The ms.jit graphs of collected cells, freed where MindSpore cannot be waiting for the thread that frees them.

    A cell is collected wherever Python's collector runs: also on one of MindSpore's kernel threads, when a Python
    kernel (a ported torch.autograd.Function) allocates while the caller's thread waits inside MindSpore, holding its
    graph executor. Freeing there waited for that executor, which waited for the kernel: the process hung. So a
    collected cell's graphs are freed at once only on the main thread with no ported call under way, and otherwise
    at the start of the next ported call (`call`), on the caller's thread, before it enters MindSpore."""

    def __init__(self):
        self._lock = threading.Lock()       # the count of calls under way
        self._releasing = threading.Lock()  # one thread frees at a time
        self._pending: list[set[str]] = []
        self._calls = 0

    def _safe(self) -> bool:
        return threading.current_thread() is threading.main_thread() and self._calls == 0

    def collected(self, module: str, cell_id: int) -> None:
        phases = jit_phases(module, cell_id)  # now: the id may name another cell later
        if not phases:
            return
        if self._safe():
            free_jit_phases(phases)
        else:
            self._pending.append(phases)  # list.append: atomic, no lock where the collector may run

    def release(self) -> int:
        """Frees what was left for later; the number of graphs freed."""
        freed = 0
        with self._releasing:
            while self._pending:
                freed += free_jit_phases(self._pending.pop())
        return freed

    @contextlib.contextmanager
    def call(self):
        """Around a ported cell's call: what was left is freed first (the caller is not inside MindSpore yet)."""
        if self._pending and self._calls == 0:
            self.release()
        with self._lock:
            self._calls += 1
        try:
            yield
        finally:
            with self._lock:
                self._calls -= 1


COLLECTED_GRAPHS = CollectedGraphs()

_PHASES = {True: "train", False: "predict"}


def sync_phase(target: nn.Cell, training: bool) -> None:
    """Gives `target` the phase of `training`, so that its compiled graph is the one of that mode."""
    phase = _PHASES[bool(training)]
    if target.phase != phase:
        target.phase = phase


class PyNativeGraph:
    """Calls `target` (the ported cell, or its flat twin) as an ms.jit graph in PyNative, with the bookkeeping
    Cell.__call__ does around construct for `cell`, the cell that was called."""

    def __init__(self, cell: nn.Cell, target: nn.Cell):
        self._cell = cell
        self._target = target
        # ms.jit of a Cell instance gives its construct, compiled on the first call for each input signature
        # (set_inputs on the cell makes it one graph for every size of a dynamic dimension).
        self._run = ms.jit(target)
        weakref.finalize(target, COLLECTED_GRAPHS.collected, type(target).construct.__module__,
                         id(target)).atexit = False

    def __call__(self, args: tuple):
        cell = self._cell
        sync_phase(self._target, cell.training)
        return run_as_called_cell(cell, self._run, args)  # the jit graph one node of autodiff's top cell
