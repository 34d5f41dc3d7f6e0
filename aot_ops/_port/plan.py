"""The value the stages of a port pass on (aot_ops._port.port): a use of a graph per mode, and what the port
learnt of the module on the way. Kept whole by plan_cache.py."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch.export import ExportedProgram

from .modes import Mode


@dataclass
class Use:
    """One graph the cell runs: for training, for evaluation, or for both when they are the same graph."""

    program: ExportedProgram | None  # torch.export's (None in a plan kept by plan_cache.py)
    graph: Any                # read from it (read/graph.py's Graph)
    fused: Any = None         # with fuse: fused.FusedGraph, its programs
    functions: tuple = ()     # functions.FunctionOperator: the user's Functions it calls, held by the cell


@dataclass
class Plan:
    """What the port produces, stage by stage: a use per mode; why the cell cannot train (None: it can); whether
    the programs get a backward (AOTAutograd's: gradients in either mode), which an evaluation-only port's do not;
    whether a per-node training graph had bfloat16 values fanned out (fan_out.py)."""

    uses: dict[Mode, Use]
    no_training: str | None
    backward: bool
    half_gradients_fanned_out: bool = False


def cannot_train_because(module_name: str, exc: Exception) -> str:
    """The reason a cell cannot train, where the training graph of a module in evaluation mode cannot be ported."""
    return f"{module_name} was ported for evaluation only; training mode cannot run: {exc}"
