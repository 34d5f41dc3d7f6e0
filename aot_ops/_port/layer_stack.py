"""A model's stack of alike layers exported as two: the other layers are written into the graph as copies of the
second one, instead of torch.export tracing each (about 0.2 s a decoder layer of a dynamic sequence: most of a
checkpoint's first port, docs/performance.md).

The models from_pretrained builds from a configuration hold their decoder layers in one ModuleList of modules of one
class. While torch.export traces the module, `shallow(stack)` leaves the list its first two layers (and the
configuration's `num_hidden_layers` 2); `expand(program, stack)` then writes layers 2 to N - 1 into the exported
graph, each a copy of layer 1's nodes reading the layer before it, its own weights and its own key/value cache, as
torch.export would have traced them. It is done only where the copies are what the trace would give:

- found (`find`): one ModuleList of three or more modules of one class; layers 1 to N - 1 hold the same attributes
  (every plain value of every submodule, apart from one that is each layer's own index, such as `layer_idx`), the
  same parameters and buffers (names, shapes, dtypes), and no hooks; the configuration's per-layer lists
  (`layer_types`, ...) say the same of each of them;
- expanded (`expand`): the two exported layers are the same computation (repeated.py's comparison: operators,
  constants, wiring, input sizes and dtypes); each is one run of nodes, nothing between them; what layer 1 reads
  is what layer 0 reads, a value of layer 0 (the hidden state passed on), a value made for each layer by the same
  expression (each cache's write position), or its own state, named as layer 0's with its index
  (`model.layers.1.mlp.up_proj.weight`, `key_cache_1`); what is read of layer 1 after it is read of the last
  layer, and its cache writes are each layer's.
Anything else raises NotExpandable, and the module is exported whole (export.py). tests/test_layer_stack.py
checks, for several model families, that the expanded graph has the whole export's inputs and outputs in order and
computes its logits and cache writes bit for bit.
"""
from __future__ import annotations

import contextlib
import copy
import logging
import re
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec,
                                          TensorArgument)

from .._core.torch_private import HigherOrderOperator, OpOverload, detect_fake_mode
from ..errors import Error
from .repeated import describe_region, layer_of, region_nodes

log = logging.getLogger(__name__)

SHALLOW = 2  # layers exported: layer 0 and the layer every later one is copied from


class NotExpandable(Error):
    """The exported layers cannot be copied into the others' places (the reason): the module is exported whole.
    (Caught inside the port: no caller sees it.)"""


@dataclass
class LayerStack:
    """The ModuleList of alike layers at `path` in the exported module, and the configuration counting them."""

    path: str
    layers: torch.nn.ModuleList
    config: Any = None  # the transformers configuration whose num_hidden_layers counts them, if any

    @property
    def count(self) -> int:
        return len(self.layers)


def find(module: torch.nn.Module) -> LayerStack | None:
    """The module's one stack of alike layers (see the module's docstring), or None."""
    stacks = [(path, child) for path, child in module.named_modules()
              if isinstance(child, torch.nn.ModuleList) and len(child) > SHALLOW
              and len({type(layer) for layer in child}) == 1]
    if len(stacks) != 1:
        return None
    path, layers = stacks[0]
    config = _counting_config(module, len(layers))
    why = _unlike(layers) or (_config_unlike(config, len(layers)) if config is not None else None)
    if why:
        log.debug("layers of %s exported one by one: %s", path, why)
        return None
    return LayerStack(path, layers, config)


@contextlib.contextmanager
def shallow(stack: LayerStack) -> Iterator[None]:
    """While inside: the stack holds its first SHALLOW layers (and its configuration counts them)."""
    modules = stack.layers._modules
    counted = getattr(stack.config, "num_hidden_layers", None) if stack.config is not None else None
    stack.layers._modules = type(modules)(list(modules.items())[:SHALLOW])
    if counted is not None:
        stack.config.num_hidden_layers = SHALLOW
    try:
        yield
    finally:
        stack.layers._modules = modules
        if counted is not None:
            stack.config.num_hidden_layers = counted


def expand(program: ExportedProgram, stack: LayerStack, module: torch.nn.Module) -> None:
    """Writes layers SHALLOW..N-1 into `program` (exported under `shallow(stack)`, functional), in place: their
    nodes, their weights' placeholders (in the order a whole export has them), their cache writes. Raises
    NotExpandable, the program unchanged, where the copies would not be what a whole export gives."""
    state = dict([*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)])
    template = _Template.of(program, stack, state)
    graph = program.graph
    new_specs: list[InputSpec] = []
    new_outputs: list[tuple[torch.fx.Node, OutputSpec]] = []
    previous, cursor = template.nodes, template.nodes[-1]
    for index in range(SHALLOW, stack.count):
        mapping = template.inputs_of(index, previous, lambda value, spec, target: _placeholder(
            graph, value, spec, target, new_specs))
        renamed = _renaming(f"{stack.path}.1", f"{stack.path}.{index}")
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
    """Layer 1 of the exported graph, and how each copy of it is wired: what it reads (`inputs`, per input of
    layer 1: ("shared", node), ("chained", position of the node in the layer before), ("own", (spec, naming)):
    the layer's own placeholder), what the rest of the graph reads of it (`later_reads`: reader, position) and the
    state it writes (`writes`: layer 1's output spec, the naming of its target, position)."""

    nodes: list[torch.fx.Node]
    inputs: list[torch.fx.Node]
    wiring: list[tuple[str, Any]]
    later_reads: list[tuple[torch.fx.Node, int]]
    writes: list[tuple[OutputSpec, Any, int]]
    placeholders: dict[str, torch.fx.Node]  # by target

    @classmethod
    def of(cls, program: ExportedProgram, stack: LayerStack, state: dict[str, torch.Tensor]) -> "_Template":
        """Layer 1's template, checked against layer 0 (raises NotExpandable); `state`: the whole module's
        parameters and buffers by name."""
        nodes = list(program.graph.nodes)
        position = {node: k for k, node in enumerate(nodes)}
        layers = [layer_of(n) if n.op == "call_function" else None for n in nodes]
        first, second = (region_nodes(nodes, f"{stack.path}.{k}", layers, functional=False) for k in range(SHALLOW))
        if not first or not second:
            raise NotExpandable("the exported graph does not hold both layers as runs of nodes")
        if any(isinstance(n.target, HigherOrderOperator)
               or (isinstance(n.target, OpOverload) and n.target._schema.is_mutable) for n in second):
            raise NotExpandable("layer 1 writes an input or opens a region")
        between = [n for n in nodes[position[first[-1]] + 1:position[second[0]]] if n.op == "call_function"]
        if between:
            raise NotExpandable(f"{between[0].name} lies between the layers")
        zeroth, layer = describe_region(first), describe_region(second)
        if zeroth is None or layer is None or zeroth.shape != layer.shape:
            raise NotExpandable("layers 0 and 1 were traced differently")
        if not _state_first(program.graph_signature.input_specs):
            raise NotExpandable("the exported inputs do not begin with the module's state")
        specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs
                 if isinstance(spec.arg, TensorArgument)}
        wiring = _wiring(zeroth.inputs, layer.inputs, first, specs, state, stack.count)
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

    def inputs_of(self, index: int, previous: list[torch.fx.Node], make_placeholder) -> dict:
        """What layer `index`'s copy reads in place of each of layer 1's inputs; `previous`: the layer before's
        nodes; make_placeholder(layer 1's placeholder, its spec, target): a placeholder for a tensor of the layer
        the graph does not have yet."""
        mapping: dict[torch.fx.Node, torch.fx.Node] = {}
        for value, (how, what) in zip(self.inputs, self.wiring):
            if how == "shared":
                mapping[value] = value
            elif how == "chained":
                mapping[value] = previous[what]
            else:
                spec, naming = what
                target = naming(index)
                if target not in self.placeholders:
                    self.placeholders[target] = make_placeholder(value, spec, target)
                mapping[value] = self.placeholders[target]
        return mapping


def _wiring(inputs0: list[torch.fx.Node], inputs1: list[torch.fx.Node], first: list[torch.fx.Node],
            specs: dict[str, InputSpec], state: dict[str, torch.Tensor], count: int) -> list[tuple[str, Any]]:
    """How layer 1 reads each of its inputs, from what layer 0 reads in the same place (_Template's `wiring`)."""
    members0 = set(first)
    memo: dict[torch.fx.Node, Any] = {}
    wiring: list[tuple[str, Any]] = []
    for value0, value1 in zip(inputs0, inputs1, strict=True):
        if value0 is value1:
            wiring.append(("shared", value1))
        elif value1 in members0 and value0 not in members0:
            wiring.append(("chained", first.index(value1)))  # the hidden state layer 0 passes on
        elif value0.op == value1.op == "call_function" and _expression(value0, memo) == _expression(value1, memo):
            wiring.append(("shared", value1))  # a value made for each layer alike (each cache's write position)
        elif value0.op == value1.op == "placeholder" and value0.name in specs and value1.name in specs:
            spec0, spec1 = specs[value0.name], specs[value1.name]
            naming = _indexed_name(spec0.target, spec1.target)
            if naming is None or spec0.kind != spec1.kind:
                raise NotExpandable(f"layer 1 reads {spec1.target} where layer 0 reads {spec0.target}")
            missing = [naming(k) for k in range(SHALLOW, count) if naming(k) not in state]
            if missing:
                raise NotExpandable(f"the module has no {missing[0]} for the layer reading {spec1.target}")
            wiring.append(("own", (spec1, naming)))
        else:
            raise NotExpandable(f"layer 1 reads {value1.name} where layer 0 reads {value0.name}")
    return wiring


def _counting_config(module: torch.nn.Module, count: int):
    """The transformers configuration among the module's that counts `count` hidden layers, or None."""
    for child in module.modules():
        config = getattr(child, "config", None)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        if getattr(text, "num_hidden_layers", None) == count:
            return text
    return None


def _unlike(layers: torch.nn.ModuleList) -> str | None:
    """Why layers 1..N-1 may compute differently (None: they hold the same attributes, state and no hooks). An
    attribute holding each layer's own index (layer_idx) is set apart; layer 0 is compared on its graph."""
    described = [_attributes(layer) for layer in layers]
    indices = {key for key in described[0]
               if all(d.get(key) == ("int", str(k)) for k, d in enumerate(described))}
    reference = {key: value for key, value in described[1].items() if key not in indices}
    for k, layer_attributes in enumerate(described[2:], start=2):
        mine = {key: value for key, value in layer_attributes.items() if key not in indices}
        if mine != reference:
            differing = sorted(set(mine.items()) ^ set(reference.items()))
            return f"layer {k} differs from layer 1 in {differing[0][0]}"
    return None


def _attributes(layer: torch.nn.Module) -> dict[str, tuple]:
    """Every submodule's class, plain attributes, parameters, buffers and hooks, by dotted name."""
    described: dict[str, tuple] = {}
    for path, module in layer.named_modules():
        described[f"{path}:class"] = ("class", f"{type(module).__module__}.{type(module).__qualname__}")
        for name, value in vars(module).items():
            if name in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"):
                continue
            if isinstance(value, dict) and name.startswith("_") and "hook" in name:
                described[f"{path}:{name}"] = ("hooks", str(len(value)))
            elif isinstance(value, (bool, int, float, str, type(None))):
                described[f"{path}:{name}"] = (type(value).__name__, str(value))
            elif isinstance(value, (tuple, list)) and all(isinstance(v, (bool, int, float, str)) for v in value):
                described[f"{path}:{name}"] = ("sequence", repr(value))
        for name, tensor in [*module._parameters.items(), *module._buffers.items()]:
            if tensor is not None:
                described[f"{path}:{name}"] = ("tensor", str(tuple(tensor.shape)), str(tensor.dtype),
                                               str(name in module._non_persistent_buffers_set))
    return described


def _config_unlike(config, count: int) -> str | None:
    """A configuration list with an entry per layer that tells layers 1..N-1 apart (layer_types, ...)."""
    for name, value in vars(config).items():
        if isinstance(value, (list, tuple)) and len(value) == count and len({repr(v) for v in value[1:]}) > 1:
            return f"the configuration's {name} differs between layers"
    return None


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


def _indexed_name(name0: str, name1: str):
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


def _own_naming(target: str, wiring: list[tuple[str, Any]]):
    """The naming of a buffer layer 1 writes: one of its own inputs (its key/value cache)."""
    for how, what in wiring:
        if how == "own" and what[0].target == target:
            return what[1]
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


def _renaming(old: str, new: str):
    def renamed(path: str) -> str:
        return new + path[len(old):] if path == old or path.startswith(old + ".") else path
    return renamed


def _layer_meta(meta: dict, renamed) -> dict:
    """A copied node's meta: the module it was traced in named as the copy's layer (error messages, repeated.py)."""
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
    program._graph_signature = ExportGraphSignature(list(program.graph_signature.input_specs), specs)


def _set_inputs(program, new_specs: list[InputSpec], state: dict[str, torch.Tensor]) -> None:
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
    program._graph_signature = ExportGraphSignature(specs, list(program.graph_signature.output_specs))
    for spec in new_specs:  # (what program.module() runs with; the port takes the module's tensors)
        tensor = state[spec.target]
        if spec.kind is InputKind.PARAMETER or spec.persistent:
            program._state_dict[spec.target] = tensor
        else:
            program._constants[spec.target] = tensor


_STATE = (InputKind.PARAMETER, InputKind.BUFFER)


def _state_first(specs) -> bool:
    """The inputs begin with the parameters and buffers (as torch.export orders them), nothing else among them."""
    kinds = [s.kind in _STATE for s in specs]
    return kinds == sorted(kinds, reverse=True)

