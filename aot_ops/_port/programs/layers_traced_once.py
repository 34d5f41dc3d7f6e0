"""Repeated layers traced once: a decoder's 22 identical layers cost AOTAutograd's joint trace one layer's work.

AOTAutograd traces every node of the exported graph through functionalisation, autograd and fake tensors: a 22-layer
Llama's training graph took 13.7 s, most of a first port (docs/performance.md). torch has the mechanism that
traces a region once and reuses it: the `invoke_subgraph` operator (what `torch.compiler.nested_compile_region`
emits), whose forward, backward and partition AOTAutograd caches per identifier within one tracing context. This
module gives the exported graph such regions and takes them out again:

- `with_repeated_regions(module, needs_grad)`: a copy of the exported graph in which each layer that is alike
  another (layers.py: the same computation, inputs of the same sizes, dtypes and need of gradients) is one
  `invoke_subgraph` call of a subgraph shared by all of them; None when no two layers are alike.
- the trace runs in `torch_private.repeated_regions_traced_once`, the context holding torch's cache of them.
- `inline_regions(joint_graph)`: AOTAutograd's joint graph, once each region's forward and backward are
  partitioned, with every `invoke_subgraph` call replaced by the nodes of its subgraph: the whole graph is then
  partitioned as without regions, and the programs read plain ATen calls as before.

The graphs AOTAutograd returns are then the same computation as without regions, partitioned layer by layer by the
same partitioner (tests/test_repeated_layers.py compares them, values and gradients, with torch).
"""
from __future__ import annotations

import copy
import operator
from collections import OrderedDict

import torch

from ..trace.layers import Layer, every_layer, is_pure

_INVOKE = torch.ops.higher_order.invoke_subgraph
_MIN_NODES = 8  # a region smaller than this costs more to call than to trace


def with_repeated_regions(module: torch.fx.GraphModule, needs_grad: list[bool]) -> torch.fx.GraphModule | None:
    """A copy of `module` (an exported graph, functional) with its repeated layers as shared `invoke_subgraph`
    regions, or None where no two layers are alike (nothing copied). `needs_grad`: whether each placeholder's value
    will require a gradient in the trace."""
    groups = _repeated(module, needs_grad)
    if not groups:
        return None
    module = copy.deepcopy(module)
    in_copy = {node.name: node for node in module.graph.nodes}  # (a copy's nodes keep their names)
    graph, replaced = module.graph, {}
    for count, members in enumerate(groups):
        members = [region.found_in(in_copy) for region in members]
        name = f"aot_ops_repeated_{count}"
        module.add_submodule(name, _subgraph(module, members[0], replaced))
        for region in members:
            _call_region(graph, name, region, replaced)
    graph.lint()
    module.recompile()
    return module


def _repeated(module: torch.fx.GraphModule, needs_grad: list[bool]) -> list[list[Layer]]:
    """The layers of `module` that are alike, grouped (groups of two or more, in graph order)."""
    groups: dict[tuple, list[Layer]] = OrderedDict()
    for layer in _layers(module, _needs_grad(module, needs_grad)):
        groups.setdefault(layer.signature, []).append(layer)
    return [members for members in groups.values() if len(members) > 1]


def inline_regions(module: torch.fx.GraphModule, _joint_inputs=None) -> torch.fx.GraphModule:
    """`module` with each `invoke_subgraph` call replaced by its subgraph's nodes (in place; returned). Run on the
    joint graph, where each region's forward and backward calls are already partitioned."""
    graph = module.graph
    calls = [n for n in graph.nodes if n.op == "call_function" and n.target is _INVOKE]
    if not calls:
        return module
    for call in calls:
        subgraph = getattr(module, call.args[0].target)  # (regions hold no region: layers.is_pure)
        operands = call.args[2:]
        env: dict[torch.fx.Node, object] = {}
        placeholders = [n for n in subgraph.graph.nodes if n.op == "placeholder"]
        for placeholder, operand in zip(placeholders, operands, strict=True):
            env[placeholder] = operand
        results = None
        with graph.inserting_before(call):
            for node in subgraph.graph.nodes:
                if node.op == "placeholder":
                    continue
                if node.op == "output":
                    results = node.args[0]
                    continue
                if node.op == "get_attr":
                    raise AssertionError(f"a region's subgraph reads an attribute ({node.target})")
                env[node] = copied = graph.node_copy(node, lambda a: env[a])
                if "partitioner_tag" in call.meta:
                    # The partitioner finds the forward by these tags: a node keeps its call's side (a region's
                    # backward holds nodes the region's own trace tagged forward)
                    copied.meta["partitioner_tag"] = call.meta["partitioner_tag"]
        values = torch.fx.node.map_arg(results, lambda a: env[a])
        for user in list(call.users):
            if user.op == "call_function" and user.target is operator.getitem:
                user.replace_all_uses_with(values[user.args[1]])
                graph.erase_node(user)
            else:
                raise AssertionError(f"an invoke_subgraph result is used whole by {user.format_node()}")
        getter = call.args[0]
        graph.erase_node(call)
        if not getter.users:
            graph.erase_node(getter)
    used = {n.target for n in graph.nodes if n.op == "get_attr"}
    for name, child in list(module.named_children()):
        if isinstance(child, torch.fx.GraphModule) and name not in used:
            delattr(module, name)
    graph.lint()
    module.recompile()
    return module


def _needs_grad(module: torch.fx.GraphModule, placeholders: list[bool]) -> dict[torch.fx.Node, bool]:
    """Whether each node's value may require a gradient in the trace: a placeholder as given, any other node if
    any node it reads may (an over-estimate, which only keeps two layers apart)."""
    flags: dict[torch.fx.Node, bool] = {}
    given = iter(placeholders)
    for node in module.graph.nodes:
        if node.op == "placeholder":
            flags[node] = next(given)
        else:
            flags[node] = any(flags.get(a, False) for a in node.all_input_nodes)
    return flags


def _layers(module: torch.fx.GraphModule, grad: dict[torch.fx.Node, bool]) -> list[Layer]:
    """Every layer of `module` that can be a region: one run of pure calls (layers.is_pure), big enough to pay."""
    found = []
    for calls in every_layer(list(module.graph.nodes)):
        layer = Layer.of(calls, grad) if len(calls) >= _MIN_NODES and all(map(is_pure, calls)) else None
        if layer is not None:
            found.append(layer)
    return found


def _subgraph(module: torch.fx.GraphModule, region: Layer, replaced: dict) -> torch.fx.GraphModule:
    """The region as a graph of its own: its inputs as placeholders, its outputs returned as a tuple. `replaced`: the
    earlier groups' region outputs by the call results that stand for them, which the region's nodes now read."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for k, value in enumerate(region.inputs):
        value = replaced.get(value, value)
        env[value] = graph.placeholder(f"input_{k}")
        env[value].meta = dict(value.meta)
    for node in region.nodes:
        env[node] = graph.node_copy(node, lambda a: env[a])
    outputs = [env[region.nodes[k]] for k in region.outputs]
    for node in outputs:
        # invoke_subgraph reads from an output's recorded value whether it needs a gradient; export's values never
        # do: without one it runs the region to find out.
        node.meta.pop("val", None)
    graph.output(tuple(outputs))
    return torch.fx.GraphModule(module, graph)


def _call_region(graph: torch.fx.Graph, name: str, region: Layer, replaced: dict) -> None:
    """Replaces the region's nodes with one call of the shared subgraph `name`, and each value the rest of the
    graph read with the call's result (`replaced` maps a replaced node to its result, for the layers after)."""
    last = region.nodes[-1]
    with graph.inserting_after(last):
        getter = graph.get_attr(name)
    with graph.inserting_after(getter):
        call = graph.call_function(_INVOKE, (getter, name, *[replaced.get(i, i) for i in region.inputs]))
    previous = call
    for k, index in enumerate(region.outputs):
        node = region.nodes[index]
        with graph.inserting_after(previous):
            result = graph.call_function(operator.getitem, (call, k))
        result.meta = dict(node.meta)
        node.replace_all_uses_with(result)
        replaced[node] = result
        previous = result
    for node in reversed(region.nodes):
        graph.erase_node(node)
