"""The programs stage of a port (fuse=True, fuse="compile"): each use's graph fused into programs (fused.py), with a
backward from AOTAutograd where the cell trains."""
from __future__ import annotations

from dataclasses import replace

import torch

from ..errors import PortError
from ..modes import Mode
from ..plan import Plan, cannot_train_because
from . import fused_cache
from .fused import fuse
from .pieces import Piece, pieced


def fused(plan: Plan, model: torch.nn.Module, trainable: set[str], input_grads: bool, compile_programs: bool,
          compile_inputs: dict[str, tuple[int | None, ...]] | None = None) -> Plan:
    """Each use's programs (fused.py): with a backward from AOTAutograd where the cell trains (fused_cache.py
    keeps its trace), the inference program alone where it does not. A training graph whose backward cannot be
    traced (a Function's backward deciding on tensor values) leaves a module in evaluation mode ported for
    evaluation only: its plan then has no training graph, and the graph left is fused without a backward.
    `compile_inputs`: the input shapes compiled programs are made for (port's)."""
    if any(use.graph.collectives for use in plan.uses.values()):
        return _pieced(plan, model, trainable, input_grads, compile_programs, compile_inputs)
    if plan.backward:
        cannot_train = _fused_with_backward(plan, model, trainable, input_grads, compile_programs)
        if cannot_train is not None:
            plan = _evaluating_only(plan, cannot_train_because(type(model).__name__, cannot_train))
    for mode, use in plan.uses.items():
        if use.fused is None:
            use.fused = fuse(use.program, use.graph, trainable, _label(model, mode), input_grads, backward=False)
        if not compile_programs:  # the torch modules the programs were made from: for compiling them only
            use.fused.sources.clear()
    if compile_inputs is not None:
        for use in plan.uses.values():
            use.fused.compile_sizes = _size_values(use.program, compile_inputs)
    return plan


def _pieced(plan: Plan, model: torch.nn.Module, trainable: set[str], input_grads: bool, compile_programs: bool,
            compile_inputs: dict[str, tuple[int | None, ...]] | None) -> Plan:
    """A graph with collectives fused piece by piece between them (pieces.py): each mode's graph then holds
    pieces and collectives, and no FusedGraph of its own."""
    for mode, use in plan.uses.items():
        use.graph = pieced(use.program, use.graph, trainable, _label(model, mode), input_grads,
                           training=plan.backward, evaluation=mode is not Mode.TRAIN, keep_sources=compile_programs)
        if compile_inputs is not None:
            sizes = _size_values(use.program, compile_inputs)
            for step in use.graph.steps:
                if isinstance(step, Piece):
                    step.fused.compile_sizes = sizes
    return plan


def _fused_with_backward(plan: Plan, model: torch.nn.Module, trainable: set[str], input_grads: bool,
                         compile_programs: bool) -> PortError | None:
    """Each use fused with its backward; the error of a training graph whose backward cannot be traced, where the
    module may then be ported for evaluation only (a module in evaluation mode with a training graph), else None.
    Any other error is raised."""
    for mode, use in plan.uses.items():
        try:
            use.fused = fused_cache.fuse(use.program, use.graph, trainable, _label(model, mode), input_grads,
                                         keep_sources=compile_programs)
        except PortError as exc:
            if model.training or mode is Mode.EVAL or plan.no_training is not None:
                raise
            return exc
    return None


def _label(model: torch.nn.Module, mode: Mode) -> str:
    return f"{type(model).__name__} ({mode.label})"


def _evaluating_only(plan: Plan, why: str) -> Plan:
    """The plan without a training graph: a graph shared by both modes becomes the evaluation graph, to be
    fused again without a backward (fused None); a separate evaluation graph keeps its programs."""
    if Mode.BOTH in plan.uses:
        return Plan({Mode.EVAL: replace(plan.uses[Mode.BOTH], fused=None)}, why, backward=False)
    return Plan({Mode.EVAL: plan.uses[Mode.EVAL]}, why, backward=False)


def _size_values(program, shapes: dict[str, tuple[int | None, ...]]) -> dict:
    """Size symbol -> value, read off the exported program's user inputs given these shapes (None: a size left
    dynamic, compiled for its whole range)."""
    values = {}
    placeholders = {n.name: n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"}
    for spec in program.graph_signature.input_specs:
        shape = shapes.get(spec.arg.name) if spec.kind.name == "USER_INPUT" else None
        if shape is None:
            continue
        for size, value in zip(placeholders[spec.arg.name].shape, shape):
            if value is not None and isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                values[size.node.expr] = value
    return values
