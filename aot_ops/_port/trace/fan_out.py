"""Gradients of a half-precision value read several times, summed by bridged ATen calls instead of MindSpore.

Per node, MindSpore's autodiff sums the gradients of a value that several operators read with its own `AddN`,
which has no bfloat16 kernel on the CPU (MindSpore 2.10): training a bfloat16 model per node fails in its
backward. Before such a training graph is read, each bfloat16 value that requires a gradient and has k > 1 readers
is fanned out once: `copies = unbind(expand(value, [k, -1, ...]), 0)`, reader i reading copies[i]. Each value then
has one reader, and the sum of the k gradients is the backward of `expand` (a bridged ATen sum), so MindSpore never
adds them. The forward costs two calls and one view per fanned-out value, in bfloat16 training graphs only.
(fuse=True needs none of this: a program's gradients are summed inside it.)
"""
from __future__ import annotations

import operator

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from .export import is_size

_HALF = (torch.bfloat16,)  # dtypes whose sum MindSpore's CPU cannot compute


def fan_out_half_gradients(program: ExportedProgram, trainable: set[str], input_grads: bool) -> int:
    """Rewrites `program`'s graph in place; the number of values fanned out. `trainable`: the parameters that
    get gradients; `input_grads`: whether floating user inputs do."""
    graph = program.graph
    needs_grad = _needs_grad(program, trainable, input_grads)
    fanned = 0
    for node in list(graph.nodes):
        value = node.meta.get("val")
        readers = [u for u in node.users if not is_size(u)]  # the graph's output included: its gradient too
        if (not isinstance(value, torch.Tensor) or value.dtype not in _HALF or node not in needs_grad
                or len(readers) < 2):
            continue
        count = len(readers)
        after = node if node.op != "placeholder" else _last_placeholder(graph)
        with graph.inserting_after(after):
            expanded = graph.call_function(torch.ops.aten.expand.default, (node, [count] + [-1] * value.dim()))
        with graph.inserting_after(expanded):
            copies = graph.call_function(torch.ops.aten.unbind.int, (expanded, 0))
        expanded.meta = {**node.meta, "val": value.expand(count, *value.shape)}
        copies.meta = {**node.meta, "val": list(expanded.meta["val"].unbind(0))}
        previous = copies
        for k, reader in enumerate(readers):
            with graph.inserting_after(previous):
                item = graph.call_function(operator.getitem, (copies, k))
            item.meta = {**node.meta, "val": copies.meta["val"][k]}
            reader.replace_input_with(node, item)
            previous = item
        fanned += 1
    if fanned:
        program.graph_module.recompile()
    return fanned


def _needs_grad(program: ExportedProgram, trainable: set[str], input_grads: bool) -> set[torch.fx.Node]:
    """The nodes a gradient flows to: trainable parameters, floating user inputs (with input_grads), and every
    call reading one of them."""
    sources = set()
    for spec in program.graph_signature.input_specs:
        if (spec.kind == InputKind.PARAMETER and spec.target in trainable) or \
                (spec.kind == InputKind.USER_INPUT and input_grads):
            sources.add(spec.arg.name)
    reached: set[torch.fx.Node] = set()
    for node in program.graph.nodes:
        if node.op == "placeholder":
            value = node.meta.get("val")
            if node.name in sources and isinstance(value, torch.Tensor) and value.is_floating_point():
                reached.add(node)
        elif node.op == "call_function" and any(arg in reached for arg in node.all_input_nodes):
            reached.add(node)
    return reached


def _last_placeholder(graph: torch.fx.Graph) -> torch.fx.Node:
    return [n for n in graph.nodes if n.op == "placeholder"][-1]
