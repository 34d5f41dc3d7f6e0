"""The tracing and reading stages of a port, for each mode: the module exported (export.py) and its graph read
(graph.py); the layer stack stage first where the port asks for it (layer_stack.py); one graph where both modes'
are the same."""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import torch

from ..errors import PortError
from ..modes import Mode
from ..plan import Plan, Use, cannot_train_because
from ..trace.checkpoints import mark_region
from ..trace.export import Inputs, export
from ..trace.fan_out import fan_out_half_gradients
from ..trace.layer_stack import export_as_two, search
from ..trace.layers import every_layer
from .graph import Graph, read

log = logging.getLogger(__name__)


def traced_and_read(model: torch.nn.Module, inputs: Inputs, dynamic_shapes: Any, no_training: str | None,
                    fuse: bool | str, trainable: set[str], input_grads: bool, export_two_layers: bool,
                    checkpoint_layers: bool = False) -> Plan:
    """The evaluation graph and, unless the port is for evaluation only, the training graph, each exported and
    read. A training graph that cannot be ported is an error for a module in training mode; for one in
    evaluation mode, the reason the cell cannot train. The exports are made functional by rewriting their
    in-place calls where that is exact (export.py), except a training graph differentiated node by node
    (fuse=False), whose per-node gradients were checked on torch's functionalisation only; such a graph has its
    bfloat16 values read several times fanned out before it is read (fan_out.py). `export_two_layers`: the
    evaluation graph exported with two of the module's alike layers, where the layer stack stage can copy the others
    (layer_stack.py). `checkpoint_layers`: every layer of the training graph recomputed in the backward, as if
    the module checkpointed each (checkpoints.py). Where the training and evaluation graphs are the same, the plan
    has one graph for both."""
    def exporting(training: bool):
        rewrite_in_place = bool(fuse) or no_training is not None
        return lambda module: export(module, inputs, dynamic_shapes, training=training,
                                     backward=no_training is None, rewrite_in_place=rewrite_in_place)

    def use(exported) -> Use:
        return Use(exported.program, read(exported.program, graph_shapes=fuse), functions=exported.functions)

    plan = Plan({}, no_training, backward=no_training is None)
    stack, why_none = search(model) if export_two_layers else (None, None)
    if why_none:
        log.debug("%s: no layers exported as two: %s", type(model).__name__, why_none)
    evaluation = None
    if stack is not None:
        outcome = export_as_two(model, stack, exporting(False))
        if not outcome.expanded:
            log.debug("%s exported whole: %s", type(model).__name__, outcome.why_whole)
        evaluation = outcome.exported
    plan.uses[Mode.EVAL] = use(evaluation or exporting(False)(model))
    if no_training is None:
        try:
            training = exporting(True)(model)
            if checkpoint_layers:
                _checkpoint_every_layer(training.program.graph)
            if not fuse:
                plan.half_gradients_fanned_out = fan_out_half_gradients(training.program, trainable,
                                                                        input_grads) > 0
            plan.uses[Mode.TRAIN] = use(training)
        except PortError as exc:
            if model.training:
                raise
            plan.no_training = cannot_train_because(type(model).__name__, exc)
    return _one_graph_where_the_same(plan)


def _checkpoint_every_layer(graph: torch.fx.Graph) -> None:
    """Each `<container>.<index>` layer's calls (layers.py) marked as one checkpoint region of its own, replacing
    the module's own regions there; PortError where the graph has no layer."""
    found = every_layer(list(graph.nodes))
    if not found:
        raise PortError('from_torch(checkpoint="layers"): the module has no numbered layers (a ModuleList or '
                        "Sequential of blocks) to checkpoint; call torch.utils.checkpoint in its forward instead")
    for region, calls in enumerate(found, start=1):
        mark_region(calls, region)


def _one_graph_where_the_same(plan: Plan) -> Plan:
    """One graph for both modes where the training and evaluation graphs are the same (no dropout, no batch
    norm): a cell then compiles and runs one graph."""
    if Mode.TRAIN in plan.uses and _same(plan.uses[Mode.TRAIN].graph, plan.uses[Mode.EVAL].graph):
        return replace(plan, uses={Mode.BOTH: plan.uses[Mode.EVAL]})
    return plan


def _same(a: Graph, b: Graph) -> bool:
    return (a.steps == b.steps and a.outputs == b.outputs and a.buffer_updates == b.buffer_updates
            and a.state == b.state and a.constants.keys() == b.constants.keys()
            and all(torch.equal(a.constants[k], b.constants[k]) for k in a.constants))
