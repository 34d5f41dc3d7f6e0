"""A layer of an exported graph, and when two layers are alike: the one idea behind both uses of a model's repeated
layers.

A layer is the run of calls torch.export attributed to one `<container>.<index>` module (`model.layers.7`): every
call from the layer's first node to its last, nodes attributed to no module in between included. Two layers are
alike when they are the same computation: the same operators with the same constant arguments, wired the same way
inside the layer, reading inputs of the same sizes, dtypes and need of gradients, read by the rest of the graph at
the same places (`Layer.alike`).

Two stages use it:
- `layers_traced_once.py` (fuse=True): the alike layers of a graph become one `invoke_subgraph` region, which
  AOTAutograd traces once for all of them;
- `layer_stack.py` (from_pretrained): a model's stack of alike layers exported as two, the later ones written into
  the graph as copies of the second.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..._core.torch_private import HigherOrderOperator, OpOverload, schema_of
from ..errors import module_of
from .export import DROPOUTS, dropout_is_identity


def layer_of(node: torch.fx.Node) -> str | None:
    """The outermost `<container>.<index>` module that torch.export says the node was traced in (`model.layers.7`
    for any node of that decoder layer), or None."""
    parts = module_of(node)[0].split(".")
    for k, part in enumerate(parts):
        if part.isdigit() and k:
            return ".".join(parts[:k + 1])
    return None


def layer_paths(nodes: list[torch.fx.Node]) -> list[str | None]:
    """Each node's layer_of (None for a node that is not a call), in the order of `nodes`."""
    return [layer_of(n) if n.op == "call_function" else None for n in nodes]


def layer_calls(nodes: list[torch.fx.Node], path: str, paths: list[str | None]) -> list[torch.fx.Node]:
    """The calls of the layer at `path` among `nodes` (a graph's, in order; `paths`: their layer_paths): every call
    from the layer's first node to its last; [] where the layer has no node, or another layer's node lies among
    them (the layer is then not one run of nodes)."""
    at = [k for k, layer in enumerate(paths) if layer == path]
    if not at:
        return []
    span = range(at[0], at[-1] + 1)
    if any(paths[k] not in (None, path) for k in span):
        return []
    return [nodes[k] for k in span if nodes[k].op == "call_function"]


def every_layer(nodes: list[torch.fx.Node]) -> list[list[torch.fx.Node]]:
    """The calls of each layer among `nodes` (a graph's, in order), layers in the order of their first node; a layer
    that is not one run of nodes (layer_calls) left out."""
    paths = layer_paths(nodes)
    found = (layer_calls(nodes, path, paths) for path in dict.fromkeys(p for p in paths if p is not None))
    return [calls for calls in found if calls]


def is_pure(node: torch.fx.Node) -> bool:
    """A call that writes none of its arguments, draws no random numbers and is no control flow or region of its
    own: a layer made of such calls computes its outputs from its inputs alone, so that it can be traced once for
    another layer (a region) or copied into another layer's place."""
    if isinstance(node.target, HigherOrderOperator):
        return False
    if isinstance(node.target, OpOverload):
        return not schema_of(node.target).is_mutable and not _draws_random_numbers(node)
    return getattr(node.target, "__module__", None) in ("_operator", "math", "torch")  # size arithmetic


def _draws_random_numbers(node: torch.fx.Node) -> bool:
    """An operator torch marks as drawing random numbers, unless its dropout probability is 0 (attention's
    `dropout_p`, 0.0 in every transformers model evaluated or trained without attention dropout) or it is a dropout
    that draws nothing (p == 0, or not in training: an evaluation graph's, read as the identity). A region with
    random operators would need torch's random state threaded through it, and a copy of one would draw anew."""
    if torch.Tag.nondeterministic_seeded not in node.target.tags:
        return False
    if node.target in DROPOUTS:
        return not dropout_is_identity(node)
    schema = schema_of(node.target)
    for k, argument in enumerate(schema.arguments):
        if argument.name == "dropout_p":
            value = node.args[k] if k < len(node.args) else node.kwargs.get("dropout_p", argument.default_value)
            return value != 0
    return True


@dataclass
class Layer:
    """The calls of one layer, in graph order, with what they read from outside and what the rest reads of them."""

    nodes: list[torch.fx.Node]
    inputs: list[torch.fx.Node]  # in order of first use
    outputs: list[int]           # positions in `nodes` of the values read after the layer
    signature: tuple             # what two alike layers have equal

    @classmethod
    def of(cls, nodes: list[torch.fx.Node], needs_grad: dict[torch.fx.Node, bool] | None = None) -> "Layer | None":
        """The layer of `nodes` (layer_calls) described: every node's operator and its arguments, each a constant, a
        node of the layer (by position) or an input (by position among the inputs), with each input's size, dtype
        and need of a gradient (`needs_grad`: by node; none where not given), and which nodes the rest of the graph
        reads. None where the rest of the graph reads none of its nodes."""
        needs_grad = needs_grad or {}
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
        signature = (calls, tuple(outputs), tuple((_value_shape(i), needs_grad.get(i, False)) for i in inputs))
        return cls(nodes, inputs, outputs, signature)

    def alike(self, other: "Layer") -> bool:
        return self.signature == other.signature

    def found_in(self, nodes_by_name: dict[str, torch.fx.Node]) -> "Layer":
        """The same layer in a copy of its graph (a copy's nodes keep their names)."""
        return replace(self, nodes=[nodes_by_name[n.name] for n in self.nodes],
                       inputs=[nodes_by_name[n.name] for n in self.inputs])


def _value_shape(node: torch.fx.Node):
    """An input's size, stride, dtype and kind, as text (symbolic sizes by their expressions)."""
    value = node.meta.get("val")
    if isinstance(value, torch.Tensor):
        return ("tensor", str(tuple(value.shape)), str(value.stride()), str(value.dtype))
    return (type(value).__name__, str(value))
