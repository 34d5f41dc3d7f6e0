"""fuse=True for a graph that calls collectives: programs between them, MindSpore's communication operators at them.

A program is one aot call, and MindSpore's collectives are operators of their own (distributed.py), so a graph
holding collectives (tensor parallel: two all-reduces a decoder layer) is cut where each stands. The run of nodes
between two collectives is a piece: a graph of its own, fused as a whole graph is (fused.py: AOTAutograd's forward
and backward programs where the cell trains, an inference program for evaluation), taking the values it reads from
before it and returning those read after it. The cell then runs per step, as a per-node port does (codegen.py): a
piece's operator, its outputs, a collective, the next piece's operator... MindSpore's autodiff chains them: each
piece's operator has the bprop calling its backward program, each collective the gradient torch gives it.

Sizes (sym_size and arithmetic on it) are never passed between pieces: a piece computes each size it needs from
a tensor it takes (copied into it, as program.cpp computes sizes from shapes at run time).

With fuse="compile" each piece's programs are compiled as a whole graph's are (compiled.py). Without a backward, a
piece writes a buffer's new value (a key/value cache's) into the buffer itself, as a whole graph's inference
program does (buffer_writes.py), unless the programs are compiled: then the cell assigns it, as per node.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from ..read.collectives import is_collective, is_copy_region, is_wait
from ..read.graph import Graph, read_module
from ..trace.export import is_size
from ..trace.fake import mode_of
from .buffer_writes import written_in_place
from .compiled import GraphSource, inference_configs
from .fused import FusedGraph, add_backward, forward_program, input_examples, output_shapes, trace_joint
from .program import build
from .program_inputs import Origin, ProgramInput, Source


@dataclass
class Piece:
    """One run of a graph's nodes between collectives, as programs: `name = piece(*arguments)`, its results
    `outputs` (value names of the enclosing graph)."""

    name: str
    outputs: list[str]
    fused: FusedGraph
    # Value names of the enclosing graph passed to each program input, in order (its constants are constants of
    # the enclosing graph): for the forward program (training), and for the inference program (evaluation).
    forward_arguments: list[str]
    inference_arguments: list[str]
    operators: int = 0  # the graph's nodes it runs

    @property
    def trains(self) -> bool:
        return self.fused.forward is not None

    @property
    def evaluates(self) -> bool:
        return self.fused.inference is not None


def pieced(program: ExportedProgram, graph: Graph, trainable: set[str], label: str, input_grads: bool,
           training: bool, evaluation: bool, keep_sources: bool = False) -> Graph:
    """`graph` (read from `program`) with each run of nodes between its collectives replaced by a Piece: for
    `training`, the forward and backward programs; for `evaluation`, the inference program. `keep_sources`: each
    program's graph kept as a torch module, for fuse="compile" (compiled.py)."""
    nodes = list(program.graph.nodes)
    # Without a backward a copy region (a column-parallel layer's input: the identity forward, a sum over the ranks
    # backward) communicates nothing: it is its input, and no cut
    through = _Through(copies=not training)
    runs, steps = _runs(nodes, through)
    collectives = {c.name: c for c in graph.collectives}
    state = dict(graph.state)
    wants_grad = _wanting_gradients(program, nodes, trainable, input_grads)
    output_node = nodes[-1]
    outputs = [through.value(v) for v in output_node.args[0]]
    read_by_steps = _read_by_later_steps(runs, nodes[:-1], through)
    # Without a backward, a buffer's new value that nothing but the module's outputs reads is written into the
    # buffer by the piece computing it (buffer_writes.py), as a whole graph's inference program does
    in_place = {} if training or keep_sources else _written_in_place(program, outputs, read_by_steps)
    out = Graph(inputs=graph.inputs, state=state,
                constants={k: v for k, v in graph.constants.items() if k in _placeholder_names(nodes)},
                out_spec=graph.out_spec)
    made: dict[int, Piece] = {}
    written: set[str] = set()
    for index, run in enumerate(runs):
        readers = [n.name for n in run if n.name in read_by_steps or n.name in outputs]
        if not readers:
            continue  # nothing read after it (torch.export's checks alone)
        reads = {through.node(source).name for node in run for source in _reads(node)}
        writes = [(in_place[v], v) for v in readers if v in in_place and in_place[v] in reads]
        written.update(v for _, v in writes)
        returned = [v for v in readers if v not in written]
        module, inputs = _piece_module(program.graph_module, run, returned, through)
        made[index] = _piece(f"piece{index}", module, inputs, returned, out.constants, wants_grad,
                             f"{label} piece {index}", training, evaluation, writes)
        made[index].operators = len(run)
        if not keep_sources:
            made[index].fused.sources.clear()
    for kind, item in steps:
        if kind == "collective":
            out.steps.append(replace(collectives[item.name], inputs=[through.value(item.args[0])]))
        elif item in made:
            out.steps.append(made[item])
    for spec, value in zip(program.graph_signature.output_specs, outputs):
        if spec.kind == OutputKind.USER_OUTPUT:
            out.outputs.append(value)
        elif spec.kind == OutputKind.BUFFER_MUTATION and value not in written:
            out.buffer_updates.append((spec.target, value))
    return out


def _written_in_place(program: ExportedProgram, outputs: list[str], read_by_steps: set[str]) -> dict[str, str]:
    """Buffer update value name -> its buffer's placeholder, for the updates nothing reads but the output (no
    later piece or collective, not a module output as well). `outputs`: the output node's value names."""
    signature = program.graph_signature
    placeholders = {spec.target: spec.arg.name for spec in signature.input_specs if spec.kind == InputKind.BUFFER}
    user = {v for spec, v in zip(signature.output_specs, outputs) if spec.kind == OutputKind.USER_OUTPUT}
    return {v: placeholders[spec.target] for spec, v in zip(signature.output_specs, outputs)
            if spec.kind == OutputKind.BUFFER_MUTATION and v not in read_by_steps and v not in user
            and outputs.count(v) == 1}


def _placeholder_names(nodes: list[torch.fx.Node]) -> set[str]:
    return {n.name for n in nodes if n.op == "placeholder"}


class _Through:
    """The nodes that are their input: a wait_tensor (its collective's result) and, with `copies`, a copy region."""

    def __init__(self, copies: bool):
        self.copies = copies

    def passes(self, node: torch.fx.Node) -> bool:
        return node.op == "call_function" and (is_wait(node.target) or (self.copies and is_copy_region(node.target)))

    def node(self, node: torch.fx.Node) -> torch.fx.Node:
        """The node whose value `node` is."""
        while self.passes(node):
            node = node.args[0]
        return node

    def value(self, node: torch.fx.Node) -> str:
        """The value name the enclosing graph gives a node."""
        return self.node(node).name


_WAITS = _Through(copies=False)


def _runs(nodes: list[torch.fx.Node], through: _Through) -> tuple[list[list[torch.fx.Node]], list[tuple[str, object]]]:
    """The runs of operator nodes between collectives, in graph order, and the steps: ("run", index) or
    ("collective", node). Sizes belong to no run (each piece computes those it reads); waits are their collective."""
    runs: list[list[torch.fx.Node]] = [[]]
    steps: list[tuple[str, object]] = []
    for node in nodes:
        if node.op != "call_function" or through.passes(node) or is_size(node):
            continue
        if is_collective(node.target):
            if runs[-1]:
                steps.append(("run", len(runs) - 1))
                runs.append([])
            steps.append(("collective", node))
        else:
            runs[-1].append(node)
    if runs[-1]:
        steps.append(("run", len(runs) - 1))
    else:
        runs.pop()
    return runs, steps


def _tensor_sources(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The tensor nodes a size node reads (through other sizes)."""
    found: list[torch.fx.Node] = []
    for arg in node.all_input_nodes:
        if is_size(arg):
            found += _tensor_sources(arg)
        else:
            found.append(arg)
    return found


def _reads(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The tensor values a node reads, sizes replaced by the tensors they are taken from."""
    reads = []
    for arg in node.all_input_nodes:
        reads += _tensor_sources(arg) if is_size(arg) else [arg]
    return reads


def _read_by_later_steps(runs: list[list[torch.fx.Node]], nodes: list[torch.fx.Node], through: _Through) -> set[str]:
    """The names of the runs' values read outside the run computing them: by another run or a collective (`nodes`:
    the graph's, its output node left out)."""
    owner = {n.name: k for k, run in enumerate(runs) for n in run}
    read: set[str] = set()
    for node in nodes:
        if node.op == "call_function" and (is_size(node) or through.passes(node)):
            continue
        here = owner.get(node.name)
        for arg in _reads(node):
            name = through.value(arg)
            source = owner.get(name)
            if source is not None and source != here:
                read.add(name)
    return read


def _piece_module(root: torch.fx.GraphModule, run: list[torch.fx.Node], outputs: list[str],
                  through: _Through) -> tuple[torch.fx.GraphModule, list[str]]:
    """The run as a graph module: a placeholder per tensor it reads from before it (named as the enclosing graph
    names it), the sizes it reads computed again from their tensors, and an output tuple of `outputs`; and the
    names of its placeholders in order."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    members = set(run)
    for node in run:
        for source in map(through.node, _reads(node)):
            if source not in members and source not in env:
                env[source] = graph.placeholder(source.name)
                env[source].meta = dict(source.meta)
    inputs = [p.name for p in env.values()]

    def arg(node: torch.fx.Node) -> torch.fx.Node:
        node = through.node(node)
        if node not in env:  # a size: computed here from the tensor it is taken from
            env[node] = graph.node_copy(node, arg)
        return env[node]

    for node in run:
        env[node] = graph.node_copy(node, arg)
    by_name = {n.name: env[n] for n in run}
    graph.output(tuple(by_name[n] for n in outputs))
    return torch.fx.GraphModule(root, graph), inputs


def _wanting_gradients(program: ExportedProgram, nodes: list[torch.fx.Node], trainable: set[str],
                       input_grads: bool) -> set[str]:
    """The values that may get a gradient: trainable parameters, floating user inputs (with `input_grads`), and
    floating values computed from them (a collective's result as its input's)."""
    wanting: set[str] = set()
    specs = program.graph_signature.input_specs
    for spec, node in zip(specs, (n for n in nodes if n.op == "placeholder")):
        if (spec.kind == InputKind.PARAMETER and spec.target in trainable) or \
                (input_grads and spec.kind == InputKind.USER_INPUT and _floating(node)):
            wanting.add(node.name)
    for node in nodes:
        if node.op == "call_function" and _floating(node) and \
                any(_WAITS.value(a) in wanting for a in node.all_input_nodes):
            wanting.add(_WAITS.value(node))
    return wanting


def _floating(node: torch.fx.Node) -> bool:
    val = node.meta.get("val")
    values = val if isinstance(val, (tuple, list)) else [val]
    return any(isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex()) for v in values)


def _piece(name: str, module: torch.fx.GraphModule, inputs: list[str], outputs: list[str],
           constants: dict[str, torch.Tensor], wanting: set[str], label: str, training: bool,
           evaluation: bool, writes: list[tuple[str, str]] = ()) -> Piece:
    """The piece's programs; the constants they take are added to `constants` (the enclosing graph's), under
    names of their own. `writes`: (buffer placeholder, value) pairs the inference program writes into the buffer's
    memory (without a backward: buffer_writes.py)."""
    fused = FusedGraph(None, None, [], {}, [], list(range(len(outputs))))
    forward_arguments: list[str] = []
    if training:
        examples = [p.meta["val"] for p in module.graph.find_nodes(op="placeholder")]
        with mode_of(examples):
            flat = [v.detach().clone().requires_grad_(n in wanting and (v.is_floating_point() or v.is_complex()))
                    for n, v in zip(inputs, examples)]
        joint = trace_joint(module, flat, label)
        fused, wiring = forward_program(joint, label, [ProgramInput.user(n) for n in inputs], [],
                                        list(range(len(outputs))))
        if "backward" in joint.captured:
            add_backward(fused, joint, wiring, label)
        forward_arguments = _arguments(name, fused.inputs, fused, constants)
        for constant in fused.backward_constants:
            constants[_constant_name(name, constant)] = fused.constants[constant.name]
    inference_arguments: list[str] = []
    if evaluation:
        graph, names, outs = read_module(module)
        nodes = {n.name: n for n in module.graph.nodes}
        if writes:  # (its outputs named, which must not be views of what a write overwrites)
            graph = written_in_place(replace(graph, outputs=list(outs)), list(writes),
                                     {n: node.meta.get("val") for n, node in nodes.items()})
        fused.inference = build(f"{label} inference", graph, names + list(graph.constants), outs,
                                *output_shapes(nodes, outs, names), writes=list(writes))
        fused.inference_inputs = [ProgramInput.user(n) for n in names] + \
            [ProgramInput.constant(Origin.INFERENCE, n) for n in graph.constants]
        fused.constants.update({i.name: t for i, t in zip(fused.inference_inputs[len(names):],
                                                          graph.constants.values())})
        fused.inference_user_outputs = list(range(len(outputs)))
        fused.sources["inference"] = GraphSource(module, len(names), list(range(len(outs))),
                                                 input_examples(nodes, names, graph.constants),
                                                 configs=inference_configs(module))
        inference_arguments = _arguments(name, fused.inference_inputs, fused, constants)
    return Piece(name, outputs, fused, forward_arguments, inference_arguments)


def _constant_name(piece: str, program_input: ProgramInput) -> str:
    """The enclosing graph's name of a piece's constant (each piece's programs name theirs alike)."""
    return f"{piece}_{program_input.name}"


def _arguments(piece: str, inputs: list[ProgramInput], fused: FusedGraph,
               constants: dict[str, torch.Tensor]) -> list[str]:
    """The enclosing graph's value names passed to `inputs`, its constants added to `constants`."""
    names = []
    for program_input in inputs:
        if program_input.source is Source.CONSTANT:
            names.append(_constant_name(piece, program_input))
            constants[names[-1]] = fused.constants[program_input.name]
        else:
            names.append(program_input.name)
    return names
