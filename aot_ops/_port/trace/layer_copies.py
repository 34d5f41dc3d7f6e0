"""The later layers of a stack written into a graph exported with two of them (layer_stack.py): each a copy of
layer 1's nodes reading the layer before it, its own weights and its own key/value cache, as torch.export would have
traced them.

`expand(program, path, count, state)` checks that the copies are what a whole export gives, and raises
NotExpandable (the program unchanged) otherwise:
- the two exported layers are alike (layers.py) and pure, each one run of nodes, nothing between them;
- what layer 1 reads is what layer 0 reads, a value of layer 0 (the hidden state passed on), a value made for each
  layer by the same expression (each cache's write position), or its own state, named as layer 0's with its index
  (`model.layers.1.mlp.up_proj.weight`, `key_cache_1`);
- what is read of layer 1 after it is read of the last layer, and its cache writes are each layer's.
"""
from __future__ import annotations

import copy
import enum
import re
from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec,
                                          TensorArgument)

from ..._core.torch_private import detect_fake_mode, set_program_signature, set_program_state
from ...errors import Error
from .layers import Layer, is_pure, layer_calls, layer_paths

SHALLOW = 2  # layers exported: layer 0 and the layer every later one is copied from


class NotExpandable(Error):
    """The exported layers cannot be copied into the others' places (the reason): the module is exported whole.
    (Caught by the layer stack's stage: no caller of the port sees it.)"""


class Source(enum.Enum):
    """Where a copy of layer 1 takes one of layer 1's inputs from."""

    SHARED = "shared"    # the same value layer 1 reads (the attention mask, the positions)
    CHAINED = "chained"  # the node at the same position of the layer before (the hidden state passed on)
    OWN = "own"          # a placeholder of the copy's own: its weight or cache, named by its index


@dataclass(frozen=True)
class Wire:
    """How the copies read one input of layer 1."""

    source: Source
    position: int = -1                          # CHAINED: the node's position in the layer before
    spec: InputSpec | None = None               # OWN: layer 1's input spec
    naming: Callable[[int], str] | None = None  # OWN: layer k's tensor name


def expand(program: ExportedProgram, path: str, count: int, state: dict[str, torch.Tensor]) -> None:
    """Writes layers SHALLOW..count-1 of the stack at `path` into `program` (exported with the first SHALLOW layers,
    functional), in place: their nodes, their weights' placeholders (in the order a whole export has them), their
    cache writes. `state`: the whole module's parameters and buffers by name. Raises NotExpandable, the program
    unchanged, where the copies would not be what a whole export gives."""
    template = _Template.of(program, path, count, state)
    graph = program.graph
    new_specs: list[InputSpec] = []
    new_outputs: list[tuple[torch.fx.Node, OutputSpec]] = []
    previous, cursor = template.nodes, template.nodes[-1]
    for index in range(SHALLOW, count):
        for value, wire in zip(template.inputs, template.wiring):
            target = wire.naming(index) if wire.source is Source.OWN else None
            if target is not None and target not in template.placeholders:
                template.placeholders[target] = _placeholder(graph, value, wire.spec, target, new_specs)
        mapping = template.reads_of(index, previous)
        renamed = _renaming(f"{path}.1", f"{path}.{index}")
        copies: list[torch.fx.Node] = []
        for node in template.nodes:
            with graph.inserting_after(cursor):
                cursor = graph.node_copy(node, lambda a: mapping[a])
            cursor.meta = _layer_meta(node.meta, renamed)
            mapping[node] = cursor
            copies.append(cursor)
        for spec, naming, at in template.writes:
            new_outputs.append((copies[at], OutputSpec(spec.kind, TensorArgument(copies[at].name), naming(index))))
        previous = copies
    for user, at in template.later_reads:
        user.replace_input_with(template.nodes[at], previous[at])
    _set_outputs(program, template.writes, new_outputs)
    _set_inputs(program, new_specs, state)
    graph.lint()
    program.graph_module.recompile()


@dataclass
class _Template:
    """Layer 1 of the exported graph, and how each copy of it is wired: how it reads each of layer 1's inputs
    (`wiring`), what the rest of the graph reads of it (`later_reads`: reader, position) and the state it writes
    (`writes`: layer 1's output spec, the naming of its target, position); the state placeholders by target."""

    nodes: list[torch.fx.Node]
    inputs: list[torch.fx.Node]
    wiring: list[Wire]
    later_reads: list[tuple[torch.fx.Node, int]]
    writes: list[tuple[OutputSpec, Callable[[int], str], int]]
    placeholders: dict[str, torch.fx.Node]

    @classmethod
    def of(cls, program: ExportedProgram, path: str, count: int, state: dict[str, torch.Tensor]) -> "_Template":
        """Layer 1's template, checked against layer 0 (raises NotExpandable)."""
        nodes = list(program.graph.nodes)
        position = {node: k for k, node in enumerate(nodes)}
        paths = layer_paths(nodes)
        first, second = (layer_calls(nodes, f"{path}.{k}", paths) for k in range(SHALLOW))
        if not first or not second:
            raise NotExpandable("the exported graph does not hold both layers as runs of nodes")
        if not all(map(is_pure, second)):
            raise NotExpandable("layer 1 writes an input, draws random numbers or opens a region")
        between = [n for n in nodes[position[first[-1]] + 1:position[second[0]]] if n.op == "call_function"]
        if between:
            raise NotExpandable(f"{between[0].name} lies between the layers")
        zeroth, layer = Layer.of(first), Layer.of(second)
        if zeroth is None or layer is None or not zeroth.alike(layer):
            raise NotExpandable("layers 0 and 1 were traced differently")
        if not _state_first(program.graph_signature.input_specs):
            raise NotExpandable("the exported inputs do not begin with the module's state")
        specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs
                 if isinstance(spec.arg, TensorArgument)}
        wiring = _wiring(zeroth.inputs, layer.inputs, first, specs, state, count)
        output_node = nodes[-1]
        members0, members1 = set(first), set(second)
        later_reads = []
        for at, node in enumerate(second):
            for user in node.users:
                if user in members1 or user is output_node:
                    continue
                if position[user] < position[second[-1]]:
                    raise NotExpandable(f"{user.name} reads layer 1 before its end")
                later_reads.append((user, at))
        for node in first:
            if any(user not in members0 and user not in members1 and user is not output_node for user in node.users):
                raise NotExpandable(f"{node.name} of layer 0 is read after layer 1")
        writes = []
        for value, spec in zip(output_node.args[0], program.graph_signature.output_specs, strict=True):
            if isinstance(value, torch.fx.Node) and value in members1:
                naming = _own_naming(spec.target, wiring) if spec.kind is OutputKind.BUFFER_MUTATION else None
                if naming is None:
                    raise NotExpandable(f"the graph returns layer 1's {value.name} ({spec.kind.name})")
                writes.append((spec, naming, second.index(value)))
        placeholders = {spec.target: n for n in nodes if n.op == "placeholder"
                        for spec in [specs.get(n.name)] if spec is not None and spec.target is not None}
        return cls(second, layer.inputs, wiring, later_reads, writes, placeholders)

    def reads_of(self, index: int, previous: list[torch.fx.Node]) -> dict[torch.fx.Node, torch.fx.Node]:
        """What layer `index`'s copy reads in place of each of layer 1's inputs (its own placeholders made
        before); `previous`: the layer before's nodes."""
        mapping: dict[torch.fx.Node, torch.fx.Node] = {}
        for value, wire in zip(self.inputs, self.wiring):
            if wire.source is Source.SHARED:
                mapping[value] = value
            elif wire.source is Source.CHAINED:
                mapping[value] = previous[wire.position]
            else:
                mapping[value] = self.placeholders[wire.naming(index)]
        return mapping


def _wiring(inputs0: list[torch.fx.Node], inputs1: list[torch.fx.Node], first: list[torch.fx.Node],
            specs: dict[str, InputSpec], state: dict[str, torch.Tensor], count: int) -> list[Wire]:
    """How layer 1 reads each of its inputs, from what layer 0 reads in the same place."""
    members0 = set(first)
    memo: dict[torch.fx.Node, Any] = {}
    wiring: list[Wire] = []
    for value0, value1 in zip(inputs0, inputs1, strict=True):
        if value0 is value1:
            wiring.append(Wire(Source.SHARED))
        elif value1 in members0 and value0 not in members0:
            wiring.append(Wire(Source.CHAINED, position=first.index(value1)))  # the hidden state layer 0 passes on
        elif value0.op == value1.op == "call_function" and _expression(value0, memo) == _expression(value1, memo):
            wiring.append(Wire(Source.SHARED))  # a value made for each layer alike (each cache's write position)
        elif value0.op == value1.op == "placeholder" and value0.name in specs and value1.name in specs:
            spec0, spec1 = specs[value0.name], specs[value1.name]
            naming = indexed_name(spec0.target, spec1.target)
            if naming is None or spec0.kind != spec1.kind:
                raise NotExpandable(f"layer 1 reads {spec1.target} where layer 0 reads {spec0.target}")
            missing = [naming(k) for k in range(SHALLOW, count) if naming(k) not in state]
            if missing:
                raise NotExpandable(f"the module has no {missing[0]} for the layer reading {spec1.target}")
            wiring.append(Wire(Source.OWN, spec=spec1, naming=naming))
        else:
            raise NotExpandable(f"layer 1 reads {value1.name} where layer 0 reads {value0.name}")
    return wiring


_IDENTITIES = {torch.ops.aten.clone.default, torch.ops.aten.alias.default}
_CONVERSIONS = {torch.ops.aten.to.dtype, torch.ops.aten.to.dtype_layout, torch.ops.aten.to.device,
                torch.ops.aten._to_copy.default}


def _expression(node: torch.fx.Node, memo: dict) -> Any:
    """What a value computed before the layers is, as a nested tuple: its operator and arguments down to the
    graph's inputs, copies and conversions to the same dtype and device left out (values equal whatever they
    are). Two values of equal expressions are equal: layer 0's and layer 1's (say, each cache layer's write
    position) then stand for each later layer's too. A constant that differs (an index per layer) makes them
    unequal."""
    if node in memo:
        return memo[node]
    if node.op != "call_function":
        result: Any = ("input", node.name)
    elif node.target in _IDENTITIES or (node.target in _CONVERSIONS and _same_kind(node, node.args[0])):
        result = _expression(node.args[0], memo)
    else:
        def described(value):
            return _expression(value, memo) if isinstance(value, torch.fx.Node) else ("constant", repr(value))
        result = (str(node.target), torch.fx.node.map_aggregate(tuple(node.args), described),
                  tuple(sorted((k, torch.fx.node.map_aggregate(v, described)) for k, v in node.kwargs.items())))
    memo[node] = result
    return result


def _same_kind(node: torch.fx.Node, source: Any) -> bool:
    value, before = node.meta.get("val"), getattr(source, "meta", {}).get("val")
    return (isinstance(value, torch.Tensor) and isinstance(before, torch.Tensor) and value.dtype == before.dtype
            and value.device == before.device)


_NUMBER = re.compile(r"\d+")


def indexed_name(name0: str, name1: str) -> Callable[[int], str] | None:
    """The naming k -> the name of layer k's tensor, where `name0` and `name1` are layer 0's and layer 1's names
    differing in one number only (0 and 1); None otherwise."""
    parts0, parts1 = _NUMBER.split(name0), _NUMBER.split(name1)
    numbers0, numbers1 = _NUMBER.findall(name0), _NUMBER.findall(name1)
    if parts0 != parts1 or len(numbers0) != len(numbers1):
        return None
    differing = [k for k, (a, b) in enumerate(zip(numbers0, numbers1)) if a != b]
    if len(differing) != 1 or (numbers0[differing[0]], numbers1[differing[0]]) != ("0", "1"):
        return None
    at = differing[0]

    def naming(index: int) -> str:
        numbers = list(numbers1)
        numbers[at] = str(index)
        return "".join(part + (numbers[k] if k < len(numbers) else "") for k, part in enumerate(parts1))
    return naming


def _own_naming(target: str, wiring: list[Wire]) -> Callable[[int], str] | None:
    """The naming of a buffer layer 1 writes: one of its own inputs (its key/value cache)."""
    for wire in wiring:
        if wire.source is Source.OWN and wire.spec.target == target:
            return wire.naming
    return None


def _placeholder(graph: torch.fx.Graph, like: torch.fx.Node, spec: InputSpec, target: str,
                 new_specs: list[InputSpec]) -> torch.fx.Node:
    """A placeholder for a later layer's `target` (its spec added to `new_specs`), its value a fake tensor like
    layer 1's; _set_inputs puts it in its place."""
    with graph.inserting_before(next(iter(graph.nodes))):
        node = graph.placeholder(("p_" if spec.kind is InputKind.PARAMETER else "b_")
                                 + re.sub(r"\W", "_", target).lower())
    value = like.meta["val"]
    node.meta = copy.copy(like.meta)
    with detect_fake_mode([value]):
        node.meta["val"] = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=value.device,
                                               requires_grad=value.requires_grad)
    new_specs.append(InputSpec(spec.kind, TensorArgument(node.name), target, spec.persistent))
    return node


def _renaming(old: str, new: str) -> Callable[[str], str]:
    def renamed(path: str) -> str:
        return new + path[len(old):] if path == old or path.startswith(old + ".") else path
    return renamed


def _layer_meta(meta: dict, renamed: Callable[[str], str]) -> dict:
    """A copied node's meta: the module it was traced in named as the copy's layer (error messages, layer_of)."""
    meta = copy.copy(meta)
    stack = meta.get("nn_module_stack")
    if stack:
        meta["nn_module_stack"] = {key: (renamed(path), kind) for key, (path, kind) in stack.items()}
    return meta


def _set_outputs(program: ExportedProgram, writes, new_outputs) -> None:
    """The copies' cache writes returned after layer 1's, as a whole export orders them (layer by layer)."""
    if not new_outputs:
        return
    output_node = next(n for n in reversed(program.graph.nodes) if n.op == "output")
    outputs, specs = list(output_node.args[0]), list(program.graph_signature.output_specs)
    written = {spec.arg.name for spec, _, _ in writes}
    last_write = max(k for k, spec in enumerate(specs) if spec.arg.name in written)
    outputs[last_write + 1:last_write + 1] = [node for node, _ in new_outputs]
    specs[last_write + 1:last_write + 1] = [spec for _, spec in new_outputs]
    output_node.args = (type(output_node.args[0])(outputs),)
    set_program_signature(program, ExportGraphSignature(list(program.graph_signature.input_specs), specs))


def _set_inputs(program: ExportedProgram, new_specs: list[InputSpec], state: dict[str, torch.Tensor]) -> None:
    """The copies' weights and buffers among the inputs in the order a whole export gives them: first the module's
    parameters then its buffers, each in the module's own order (`_state_first` checked that the export begins
    with them); the placeholders moved to match."""
    if not new_specs:
        return
    order = {name: k for k, name in enumerate(state)}
    specs = list(program.graph_signature.input_specs) + new_specs
    held = sorted((s for s in specs if s.kind in _STATE), key=lambda s: (s.kind is InputKind.BUFFER,
                                                                        order.get(s.target, len(order))))
    specs = held + [s for s in specs if s.kind not in _STATE]
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    anchor = None
    for spec in specs:
        node = placeholders[spec.arg.name]
        if anchor is None:
            first = next(iter(program.graph.nodes))
            if node is not first:
                first.prepend(node)
        else:
            anchor.append(node)
        anchor = node
    set_program_signature(program, ExportGraphSignature(specs, list(program.graph_signature.output_specs)))
    for spec in new_specs:  # (what program.module() runs with; the port takes the module's tensors)
        set_program_state(program, spec.target, state[spec.target],
                          persistent=spec.kind is InputKind.PARAMETER or spec.persistent)


_STATE = (InputKind.PARAMETER, InputKind.BUFFER)


def _state_first(specs) -> bool:
    """The inputs begin with the parameters and buffers (as torch.export orders them), nothing else among them."""
    kinds = [s.kind in _STATE for s in specs]
    return kinds == sorted(kinds, reverse=True)
