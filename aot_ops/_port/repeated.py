"""Repeated layers traced once: a decoder's 22 identical layers cost AOTAutograd's joint trace one layer's work.

AOTAutograd traces every node of the exported graph through functionalisation, autograd and fake tensors: a 22-layer
Llama's training graph took 13.7 s, most of a first port (docs/performance.md). torch has the mechanism that
traces a region once and reuses it: the `invoke_subgraph` operator (what `torch.compiler.nested_compile_region`
emits), whose forward, backward and partition AOTAutograd caches per identifier within one tracing context. This
module gives the exported graph such regions and takes them out again:

- `with_repeated_regions(module, needs_grad)`: a copy of the exported graph in which each layer (the nodes torch.export
  attributed to one `<container>.<index>` module, e.g. `model.layers.7`) that is the same as another layer (the
  same operators with the same constant arguments wired the same way, inputs of the same sizes, dtypes and need of
  gradients) is one `invoke_subgraph` call of a subgraph shared by all of them; None when no two layers are alike.
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
from dataclasses import dataclass, replace

import torch

from .._core.torch_private import HigherOrderOperator, OpOverload
from .errors import module_of

_INVOKE = torch.ops.higher_order.invoke_subgraph
_MIN_NODES = 8  # a region smaller than this costs more to call than to trace


@dataclass
class _Region:
    """The nodes of one layer, in graph order, with what they read from outside and what the rest reads of them."""

    nodes: list[torch.fx.Node]
    inputs: list[torch.fx.Node]
    outputs: list[int]  # positions in `nodes`
    shape: tuple        # what must be equal for two layers to share one subgraph

    def found_in(self, nodes_by_name: dict[str, torch.fx.Node]) -> "_Region":
        """The same region in a copy of its graph."""
        return replace(self, nodes=[nodes_by_name[n.name] for n in self.nodes],
                       inputs=[nodes_by_name[n.name] for n in self.inputs])


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
        module.add_submodule(name, _subgraph(module, members[0]))
        for region in members:
            _call_region(graph, name, region, replaced)
    graph.lint()
    module.recompile()
    return module


def _repeated(module: torch.fx.GraphModule, needs_grad: list[bool]) -> list[list[_Region]]:
    """The layers of `module` that are alike, grouped (groups of two or more, in graph order)."""
    groups: dict[tuple, list[_Region]] = OrderedDict()
    for region in _regions(module, _needs_grad(module, needs_grad)):
        groups.setdefault(region.shape, []).append(region)
    return [members for members in groups.values() if len(members) > 1]


def inline_regions(module: torch.fx.GraphModule, _joint_inputs=None) -> torch.fx.GraphModule:
    """`module` with each `invoke_subgraph` call replaced by its subgraph's nodes (in place; returned). Run on the
    joint graph, where each region's forward and backward calls are already partitioned."""
    graph = module.graph
    calls = [n for n in graph.nodes if n.op == "call_function" and n.target is _INVOKE]
    if not calls:
        return module
    for call in calls:
        subgraph = getattr(module, call.args[0].target)  # (regions hold no region: _functional)
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


def layer_of(node: torch.fx.Node) -> str | None:
    """The outermost `<container>.<index>` module that torch.export says the node was traced in (`model.layers.7`
    for any node of that decoder layer), or None."""
    parts = module_of(node)[0].split(".")
    for k, part in enumerate(parts):
        if part.isdigit() and k:
            return ".".join(parts[:k + 1])
    return None


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


def _regions(module: torch.fx.GraphModule, grad: dict[torch.fx.Node, bool]) -> list[_Region]:
    """Each layer's region (region_nodes), described."""
    nodes = list(module.graph.nodes)
    layers = [layer_of(n) if n.op == "call_function" else None for n in nodes]
    regions = []
    for path in OrderedDict.fromkeys(layers):
        members = region_nodes(nodes, path, layers) if path is not None else []
        region = _described(members, grad) if len(members) >= _MIN_NODES else None
        if region is not None:
            regions.append(region)
    return regions


def region_nodes(nodes: list[torch.fx.Node], path: str, layers: list[str | None] | None = None,
                 functional: bool = True) -> list[torch.fx.Node]:
    """The calls of the layer at `path` among `nodes` (a graph's, in order): every call from the layer's first
    node to its last (nodes torch.export attributed to no module in between belong to it); [] where another
    layer's node is among them or (`functional`) a call is not a functional ATen or custom operator drawing no
    random numbers. `layers`: each node's layer_of (None for a node that is no call), where the caller has them."""
    if layers is None:
        layers = [layer_of(n) if n.op == "call_function" else None for n in nodes]
    at = [k for k, layer in enumerate(layers) if layer == path]
    if not at:
        return []
    span = range(at[0], at[-1] + 1)
    members = [nodes[k] for k in span if nodes[k].op == "call_function"]
    if any(layers[k] not in (None, path) for k in span) or (functional and not all(map(_functional, members))):
        return []
    return members


def describe_region(nodes: list[torch.fx.Node]) -> _Region | None:
    """The region of `nodes` (region_nodes) described as with_repeated_regions compares layers, no input needing a
    gradient; None where the rest of the graph reads none of its nodes."""
    return _described(nodes, {})


def _functional(node: torch.fx.Node) -> bool:
    """A call that writes none of its arguments, draws no random numbers and is no control flow or region of its
    own."""
    if isinstance(node.target, HigherOrderOperator):
        return False
    if isinstance(node.target, OpOverload):
        return not node.target._schema.is_mutable and not _draws_random_numbers(node)
    return getattr(node.target, "__module__", None) in ("_operator", "math", "torch")  # size arithmetic


def _draws_random_numbers(node: torch.fx.Node) -> bool:
    """An operator torch marks as drawing random numbers, unless its dropout probability is 0 (attention's
    `dropout_p`, 0.0 in every transformers model evaluated or trained without attention dropout). A region with
    random operators would need torch's random state threaded through it."""
    if torch.Tag.nondeterministic_seeded not in node.target.tags:
        return False
    schema = node.target._schema
    for k, argument in enumerate(schema.arguments):
        if argument.name == "dropout_p":
            value = node.args[k] if k < len(node.args) else node.kwargs.get("dropout_p", argument.default_value)
            return value != 0
    return True


def _described(nodes: list[torch.fx.Node], grad: dict) -> _Region | None:
    """The region with its `shape`: every node's operator and its arguments, each a constant, a node of the region
    (by position) or an input (by position among the inputs, in order of first use), with each input's size,
    dtype and need of a gradient, and which nodes the rest of the graph reads."""
    position = {n: k for k, n in enumerate(nodes)}
    inputs: list[torch.fx.Node] = []

    def described(value):
        if isinstance(value, torch.fx.Node):
            if value in position:
                return ("node", position[value])
            if value not in inputs:
                inputs.append(value)
            return ("input", inputs.index(value))
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, tuple(described(v) for v in value))
        if isinstance(value, dict):
            return ("dict", tuple(sorted((k, described(v)) for k, v in value.items())))
        return ("constant", type(value).__name__, repr(value))

    calls = tuple((node.target, described(node.args), described(node.kwargs)) for node in nodes)
    members = set(nodes)
    outputs = [k for k, n in enumerate(nodes) if any(u not in members for u in n.users)]
    if not outputs:
        return None
    shape = (calls, tuple(outputs), tuple((_value_shape(i), grad.get(i, False)) for i in inputs))
    return _Region(nodes, inputs, outputs, shape)


def _value_shape(node: torch.fx.Node):
    """An input's size, stride, dtype and kind, as text (symbolic sizes by their expressions)."""
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        return ("tensor", str(tuple(value.shape)), str(value.stride()), str(value.dtype))
    return (type(value).__name__, str(value))


def _subgraph(module: torch.fx.GraphModule, region: _Region) -> torch.fx.GraphModule:
    """The region as a graph of its own: its inputs as placeholders, its outputs returned as a tuple."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for k, value in enumerate(region.inputs):
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


def _call_region(graph: torch.fx.Graph, name: str, region: _Region, replaced: dict) -> None:
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
