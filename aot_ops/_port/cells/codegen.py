"""The Python source of a ported Cell: one `aten.op` per torch node, in a file a user can open.

MindSpore's GRAPH_MODE compiles a Cell from the source of its `construct`, so the ported network must be real
source in a real, importable file. The file holds one class, a subclass of PortedCell (cell.py) that adds:
- make_operators(): the aten.op of every node, with the torch module and source line that made it;
- construct(): checks of the input shapes, then the training or the evaluation graph (self.training);
- forward_train / forward_eval: one line per node, then the buffer updates, then the outputs in the module's
  structure.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import torch

from ..._aten.argtypes import CALL_TIME
from ..._aten.sizes import SizeExpr
from ..._core.bprops import bprop_source
from ..._core.dtypes import ms_name
from ..errors import PortError
from ..modes import Mode, constant_attribute, flat_twin_class, operators_attribute
from ..programs.pieces import Piece
from ..programs.program_inputs import ProgramInput, SavedFrom, Source
from ..programs.saved_in_library import wiring as saved_in_library
from ..read.collectives import Collective
from ..read.graph import Graph, Item, Operator
from .module_tree import Structure

_LINE = 118

# The modes as the generated source names them (its tables are keyed by the modes' values)
_TRAIN, _EVAL, _BOTH = Mode.TRAIN.value, Mode.EVAL.value, Mode.BOTH.value


def generate(class_name: str, module_name: str, graphs: dict[str, Graph], no_training: str | None,
             structure: Structure, fused: dict | None = None, input_grads: bool = True,
             backward: bool = True) -> str:
    """Source of `class <class_name>(PortedCell)`. `graphs` maps "train"/"eval" to their graphs (one entry, "both",
    when the two modes run the same graph); `structure` (module_tree.Structure) gives the Python expression of
    a state_dict entry's Parameter ("_cells_0[0].conv1.weight") and the lines binding the lists it indexes.
    `fused` (fuse=True) maps the same modes to their fused.FusedGraph: each forward method is then one program
    call, and a bprop per mode calls the backward program.
    `input_grads=False`: construct passes the floating inputs through ops.stop_gradient. `backward=False`
    (an inference-only port): the updated buffers are not copied for a backward that never runs. `no_training`:
    why the cell cannot train (construct raises it in training mode), or None."""
    # The source names modes by their values ("forward_train", "'eval'"): plain strings from here on.
    graphs = {Mode(m).value: g for m, g in graphs.items()}
    fused = None if fused is None else {Mode(m).value: f for m, f in fused.items()}
    first = next(iter(graphs.values()))
    counts = ", ".join(f"{_operator_count(g)} in {Mode(m).label}" for m, g in graphs.items())
    out = [f'"""{module_name} ported from PyTorch by aot_ops.from_torch.',
           "",
           "Each line of a forward method is one node of the module's torch.export graph, run as a MindSpore operator",
           "by aot_ops' generic ATen entry point (aten.op). Parameters and buffers are the cell's Parameters, named as",
           f"in the module's state_dict. Bridged operators: {counts}.",
           "This file is generated; it is rewritten when the module changes.",
           '"""',
           "import mindspore as _ms",
           "import torch",
           "",
           "from mindspore import ops as _ops",
           "",
           "from aot_ops import aten",
           "from aot_ops._port.cells.cell import PortedCell",
           "from aot_ops._port.cells.module_tree import OperatorSet",
           *(["from aot_ops._port.distributed import collective_cell"]
             if any(g.collectives for g in graphs.values()) else []),
           *(["from aot_ops._port.distributed import GatheredPiece"]
             if any(_gathered(m, g) for m, g in graphs.items()) else []),
           ""]
    cls = ["",
           f"class {class_name}(PortedCell):",
           f"    module_name = {module_name!r}",
           "",
           *_make_operators(graphs, fused),
           "",
           *_construct(module_name, first.inputs, graphs, no_training, input_grads)]
    for mode, graph in graphs.items():
        cls.append("")
        if fused:
            cls.extend(_reading_state(structure,
                                      lambda expr: _fused_forward(mode, graph, fused[mode], expr, backward)))
        else:
            cls.extend(_reading_state(structure, lambda expr: _forward(mode, graph, expr, backward)))
    if _has_dict(first.out_spec):
        cls.extend(_flat_twin(class_name, ", ".join(i.name for i in first.inputs), first.out_spec))
    # The bprop factories the class's operators name, defined before it (GRAPH_MODE compiles them from source)
    factories = [factory for mode, f in (fused or {}).items() if f.backward is not None
                 for factory in (_bprop(mode, f), _inference_bprop(mode, f))]
    factories += [_bprop(mode, f, wired) for mode, f in (fused or {}).items()
                  if mode != _EVAL and (wired := saved_in_library(f)) is not None]
    factories += [factory for mode, graph in graphs.items() for step in graph.steps
                  if isinstance(step, Piece) and step.fused.backward is not None
                  for factory in (_bprop(f"{mode}_{step.name}", step.fused),
                                  _inference_bprop(f"{mode}_{step.name}", step.fused))]
    for name, captured, params, body in factories:
        out.extend(["", *bprop_source(name, captured, params, body, _wrap)])
    for mode, graph in graphs.items():
        pieces = {step.name: step for step in graph.steps if isinstance(step, Piece)}
        for name, gathers in _gathered(mode, graph).items():
            frozen = {k for k, c in gathers.items() if _is_frozen_shard(graph.state.get(c.inputs[0], ""))}
            out.extend(_gathered_piece_class(mode, pieces[name], gathers, frozen))
    return "\n".join(out + cls) + "\n"


def _operator_count(graph: Graph) -> str:
    pieces = [s for s in graph.steps if isinstance(s, Piece)]
    if not pieces:
        return str(len(graph.operators))
    return (f"{sum(p.operators for p in pieces)} as {len(pieces)} programs between {len(graph.collectives)} "
            "collectives")


def _make_operators(graphs: dict[str, Graph], fused: dict | None) -> list[str]:
    """make_operators(): per mode an OperatorSet holding the aten.op of every node, with the torch module and
    source line that made it, or (fuse=True) the program operators."""
    out = ["    def make_operators(self):"]
    for mode, graph in graphs.items():
        out.append(f"        {Mode(mode).attribute} = OperatorSet({Mode(mode).label!r})")
        if fused:
            has_backward = fused[mode].backward is not None
            if mode != _EVAL:
                out.append(f"        {Mode(mode).attribute}.program = self.make_program({mode!r}, "
                           f"{'_bprop_' + mode if has_backward else 'None'})")
                if saved_in_library(fused[mode]) is not None:
                    out.append(f"        {Mode(mode).attribute}.program_keeping = self.make_program_keeping("
                               f"{mode!r}, _keeping_bprop_{mode})")
            if mode != _TRAIN:
                out.append(f"        {Mode(mode).attribute}.inference = self.make_inference({mode!r}, "
                           f"{'_inference_bprop_' + mode if has_backward else 'None'})")
            continue
        gathered = _gathered(mode, graph)
        for op in graph.steps:
            if isinstance(op, Collective):
                out.extend(_wrap(f"        {Mode(mode).attribute}.{op.name} = {_collective(op)}", "            "))
                continue
            if isinstance(op, Piece):
                out.extend(_piece_operators(mode, op, gathered.get(op.name)))
                continue
            if not isinstance(op, Operator):
                continue
            where = f"{op.module} ({op.module_kind})" if op.module else "(root)"
            comment = f"# {where}: {op.source}" if op.source else f"# {where}"
            out.append(_clip("        " + comment))
            out.extend(_wrap(f"        {Mode(mode).attribute}.{op.name} = {_aten_op(op)}", "            "))
    out.append("        return {" + ", ".join(f"{m!r}: {Mode(m).attribute}" for m in graphs) + "}")
    return out


def _construct(module_name: str, inputs: list, graphs: dict[str, Graph], no_training: str | None,
               input_grads: bool) -> list[str]:
    """construct(): the input checks, then the training or the evaluation graph (self.training)."""
    params = ", ".join(i.name for i in inputs)
    out = [f"    def construct(self, {params}):"]
    for spec in inputs:
        out.extend(_input_check(module_name, spec))
    if not input_grads:
        for spec in inputs:
            if spec.dtype.is_floating_point or spec.dtype.is_complex:
                out.append(f"        {spec.name} = _ops.stop_gradient({spec.name})  # input_grads=False")
    if _BOTH in graphs:
        out.append(f"        return self.forward_both({params})")
    else:
        out.append("        if self.training:")
        if _TRAIN in graphs:
            out.append(f"            return self.forward_train({params})")
        else:
            out.append(f"            raise RuntimeError({no_training!r})")
        out.append(f"        return self.forward_eval({params})")
    return out


def _has_dict(spec) -> bool:
    return _is_dict(spec) or any(_has_dict(c) for c in spec.children())


def _is_dict(spec) -> bool:
    """A dict, or a dict subclass registered with torch's pytree (Hugging Face's ModelOutput): written as a dict."""
    return isinstance(spec.type, type) and issubclass(spec.type, dict)


def _flat_twin(class_name: str, params: str, spec) -> list[str]:
    """A Cell returning the outputs as a flat tuple: a top-level GRAPH_MODE graph returning a dict runs through
    MindSpore's dynamic-type path, which cannot call a Custom operator's Python inference. PortedCell calls this
    twin at the top level and rebuilds the dict in Python; inside other graphs the dict is fine."""
    leaves = ", ".join(f"out{path}" for path in _leaf_paths(spec)) + ("," if spec.num_leaves == 1 else "")
    return ["", "",
            f"class {flat_twin_class(class_name)}(_ms.nn.Cell):",
            "    def __init__(self, cell):",
            "        super().__init__(auto_prefix=False)  # the ported cell's parameters keep their names",
            "        self.cell = cell",
            "",
            f"    def construct(self, {params}):",
            f"        out = self.cell({params})",
            f"        return ({leaves})"]


def _leaf_paths(spec, prefix: str = "") -> list[str]:
    if spec.is_leaf():
        return [prefix]
    keys = spec.context if _is_dict(spec) else range(len(spec.children()))
    return [p for key, child in zip(keys, spec.children()) for p in _leaf_paths(child, f"{prefix}[{key!r}]")]




def _reading_state(structure: Structure, method: Callable[[Callable[[str], str]], list[str]]) -> list[str]:
    """The lines of a method made by `method(state_expr)`, with the lists its state expressions index read into
    their locals after its `def` line (module_tree.Structure: one read of each list per call)."""
    keys: list[str] = []

    def state_expr(key: str) -> str:
        keys.append(key)
        return structure.state_expression(key)

    lines = method(state_expr)
    return [lines[0], *(f"        {line}" for line in structure.bindings(keys)), *lines[1:]]


def _updated_buffer_reads(updated: set[str], state_expr: Callable[[str], str],
                          backward: bool = True) -> tuple[list[str], dict[str, str]]:
    """Lines reading each buffer the graph updates into a copy first, and buffer key -> that copy's name.

    A Parameter passed to an operator reaches its bprop by reference: the bprop runs after the forward's Assign and,
    in PyNative, read the new value (`self.r = self.r * 0.5` after using r gave wrong gradients). The copy is taken
    before the Assign, so forward and backward see the value torch used. Without a backward no copy is needed."""
    lines, names = [], {}
    if not backward:
        return lines, names
    for k, key in enumerate(sorted(updated)):
        names[key] = f"_buffer_read_{k}"
        lines.append(f"        {names[key]} = _ops.deepcopy({state_expr(key)})")
    return lines, names


def _forward(mode: str, graph: Graph, state_expr: Callable[[str], str], backward: bool = True) -> list[str]:
    read_lines, copies = _updated_buffer_reads({key for key, _ in graph.buffer_updates}, state_expr, backward)

    def value(name: str) -> str:
        if name in graph.state:
            key = graph.state[name]
            return copies.get(key) or state_expr(key)
        if name in graph.constants:
            return f"self.{constant_attribute(mode, name)}"
        return name

    lines = [f"    def forward_{mode}(self, {', '.join(i.name for i in graph.inputs)}):", *read_lines]
    ops = f"self.{operators_attribute(mode)}"
    # An operator returning a list of one tensor (unbind over a size-1 dimension) gives the tensor itself, as every
    # one-output MindSpore operator does: its item is the result, not the result's first row.
    bare = {step.name for step in graph.steps if isinstance(step, Operator) and step.num_outputs == 1}
    gathered = _gathered(mode, graph)
    inside = {c.name for gathers in gathered.values() for c in gathers.values()}  # called by a GatheredPiece
    for step in graph.steps:
        if isinstance(step, Item):
            item = value(step.of) if step.of in bare else f"{value(step.of)}[{step.index}]"
            lines.append(f"        {step.name} = {item}")
        elif isinstance(step, Piece):
            lines.extend(_piece_call(mode, ops, step, value, gathered.get(step.name, {})))
        elif step.name in inside:
            continue
        else:
            shape_inputs = step.shape_inputs if isinstance(step, Operator) else []
            args = ", ".join(value(v) for v in step.inputs + shape_inputs)
            call = f"        {step.name} = {ops}.{step.name}({args})"
            lines.extend(_wrap(call, "            "))
    for key, name in graph.buffer_updates:
        lines.append(f"        self.assign({state_expr(key)}, {value(name)})")
    lines.append(f"        return {_structure(graph.out_spec, iter([value(o) for o in graph.outputs]))}")
    return lines


def _piece_operators(mode: str, piece: Piece, gathers: dict[int, Collective] | None = None) -> list[str]:
    """make_operators' lines for a piece (programs/pieces.py): its forward program, whose bprop calls its backward
    program, where it trains (with `gathers`, in its GatheredPiece); its inference program where it evaluates."""
    ops, backward = Mode(mode).attribute, piece.fused.backward is not None
    lines = [f"        # {piece.name}: {piece.operators} operators of the graph, as programs"]
    if piece.trains and mode != _EVAL and gathers:
        cells = ", ".join(f"{k}: {ops}.{c.name}" for k, c in gathers.items())
        lines.extend(_wrap(f"        {ops}.{piece.name} = self.make_gathered_piece({mode!r}, {piece.name!r}, "
                           f"_bprop_{mode}_{piece.name}, {_gathered_class(mode, piece)}, {{{cells}}})",
                           "            "))
    elif piece.trains and mode != _EVAL:
        bprop = f"_bprop_{mode}_{piece.name}" if backward else "None"
        lines.append(f"        {ops}.{piece.name} = self.make_piece({mode!r}, {piece.name!r}, {bprop})")
    if piece.evaluates and mode != _TRAIN:
        bprop = f"_inference_bprop_{mode}_{piece.name}" if backward else "None"
        lines.extend(_wrap(f"        {ops}.{piece.name}_inference = self.make_piece_inference({mode!r}, "
                           f"{piece.name!r}, {bprop})", "            "))
    return lines


def _piece_call(mode: str, ops: str, piece: Piece, value: Callable[[str], str],
                gathers: dict[int, Collective]) -> list[str]:
    """A piece's call in a forward method and its outputs: the forward program in training (its saved tensors
    follow the outputs; with `gathers`, its GatheredPiece given the shards where the gathered weights stood), the
    inference program in evaluation (after those gathers)."""
    def call(indent: str, operator: str, arguments: list[str], num_outputs: int) -> list[str]:
        lines = _wrap(f"{indent}{piece.name} = {ops}.{operator}({', '.join(arguments)})", indent + "    ")
        for k, name in enumerate(piece.outputs):
            lines.append(f"{indent}{name} = {piece.name}{'' if num_outputs == 1 else f'[{k}]'}")
        return lines

    training = []
    if piece.trains and mode != _EVAL:
        arguments = [value(gathers[k].inputs[0]) if k in gathers else value(a)
                     for k, a in enumerate(piece.forward_arguments)]
        training = call("        ", piece.name, arguments, piece.fused.forward.num_outputs)
    evaluation = []
    if piece.evaluates and mode != _TRAIN:
        evaluation = [line for c in gathers.values()
                      for line in _wrap(f"        {c.name} = {ops}.{c.name}({value(c.inputs[0])})", "            ")]
        evaluation += call("        ", f"{piece.name}_inference", [value(a) for a in piece.inference_arguments],
                           piece.fused.inference.num_outputs)
    if training and evaluation:
        return ["        if self.training:", *(f"    {line}" for line in training),
                "        else:", *(f"    {line}" for line in evaluation)]
    return training or evaluation


def _gathered(mode: str, graph: Graph) -> dict[str, dict[int, Collective]]:
    """The gathers of a sharded port (tp_unshard: a layer's weights) that a piece which trains alone reads, by that
    piece and the position of its forward input: that piece's GatheredPiece runs them, forward and backward."""
    if mode == _EVAL:
        return {}
    unshards = {c.name: c for c in graph.collectives if c.kind == "tp_unshard"}
    readers: dict[str, list] = {}
    for step in graph.steps:
        read = (step.forward_arguments + step.inference_arguments) if isinstance(step, Piece) else \
            (getattr(step, "inputs", []) + getattr(step, "shape_inputs", []))
        for name in read:
            if name in unshards:
                readers.setdefault(name, []).append(step)
    found: dict[str, dict[int, Collective]] = {}
    for name, steps in readers.items():
        piece = steps[0]
        alone = all(s is piece for s in steps) and name not in graph.outputs
        if alone and isinstance(piece, Piece) and piece.trains and piece.fused.backward is not None \
                and piece.forward_arguments.count(name) == 1:
            found.setdefault(piece.name, {})[piece.forward_arguments.index(name)] = unshards[name]
    return {piece: dict(sorted(gathers.items())) for piece, gathers in found.items()}


def _gathered_class(mode: str, piece: Piece) -> str:
    return f"_Gathered_{mode}_{piece.name}"


def _is_frozen_shard(key: str) -> bool:
    from ..sharded import FROZEN

    return key.rpartition(".")[2] == FROZEN


def _gathered_piece_class(mode: str, piece: Piece, gathers: dict[int, Collective], frozen: set[int]) -> list[str]:
    """The GatheredPiece subclass of a piece (distributed.py): construct and bprop naming every input, as GRAPH_MODE
    compiles them from source. A frozen shard (`frozen`: the positions of sharded.FROZEN Parameters, a LoRA's
    base) is gathered again for the backward but its gradient is not reduce-scattered."""
    inputs = [f"a{k}" for k in range(len(piece.forward_arguments))]
    full = ", ".join(f"self.gather_{k}({a})" if k in gathers else a for k, a in enumerate(inputs))
    grads = ", ".join(f"_ops.zeros_like({a})" if k in frozen else
                      f"self.gather_{k}.shard_gradient({a}, g[{k}])" if k in gathers else f"g[{k}]"
                      for k, a in enumerate(inputs))
    return ["", "",
            f"class {_gathered_class(mode, piece)}(GatheredPiece):",
            *_wrap(f"    def construct(self, {', '.join(inputs)}):", "            "),
            *_wrap(f"        return self.piece({full})", "            "),
            "",
            *_wrap(f"    def bprop(self, {', '.join(inputs + ['out', 'dout'])}):", "            "),
            *_wrap(f"        g = self.piece_bprop({full}, out, dout)", "            "),
            *_wrap(f"        return ({grads}{',' if len(inputs) == 1 else ''})", "            ")]


def _fused_forward(mode: str, graph: Graph, fused, state_expr: Callable[[str], str],
                   backward: bool = True) -> list[str]:
    """forward_<mode> as one program call, then the buffer updates, then the outputs."""
    read_lines, copies = _updated_buffer_reads({key for key, _ in fused.buffer_updates}, state_expr, backward)

    def value(program_input: ProgramInput) -> str:
        name = program_input.name
        if program_input.source is Source.STATE:
            return copies.get(name) or state_expr(name)
        if program_input.source is Source.CONSTANT:
            return f"self.{constant_attribute(mode, name)}"
        return name

    def call_line(indent: str, operator: str, inputs, num_outputs: int) -> list[str]:
        call = f"self.{operators_attribute(mode)}.{operator}({', '.join(value(i) for i in inputs)})"
        return _wrap(f"{indent}outs = ({call},)" if num_outputs == 1 else f"{indent}outs = {call}", indent + "    ")

    def calls(indent: str, training: bool) -> list[str]:
        """One program's call, its buffer updates (those it does not write itself), and the module's outputs."""
        if training:
            operator, program, inputs = "program", fused.forward, fused.inputs
            updates, outputs = fused.buffer_updates, fused.user_outputs
        else:
            operator, program, inputs = "inference", fused.inference, fused.inference_inputs
            updates, outputs = fused.inference_buffer_updates, fused.inference_user_outputs
        lines = call_line(indent, operator, inputs, program.num_outputs)
        wired = saved_in_library(fused) if training and backward else None
        if wired is not None:  # the same leading outputs, the saved tensors kept in the library (a gradient follows)
            lines = [f"{indent}if self.saved_in_library:",
                     *call_line(indent + "    ", "program_keeping", inputs, wired.kept_from + 1),
                     f"{indent}else:", *(f"    {line}" for line in lines)]
        lines.extend(f"{indent}self.assign({state_expr(key)}, outs[{k}])" for key, k in updates)
        lines.append(f"{indent}return {_structure(graph.out_spec, iter([f'outs[{k}]' for k in outputs]))}")
        return lines

    lines = [f"    def forward_{mode}(self, {', '.join(i.name for i in graph.inputs)}):", *read_lines]
    # Training runs the forward program (its saved tensors feed the backward), evaluation the inference program
    if mode == _TRAIN:
        lines.extend(calls("        ", training=True))
    elif mode == _EVAL:
        lines.extend(calls("        ", training=False))
    else:
        lines.append("        if self.training:")
        lines.extend(calls("            ", training=True))
        lines.extend(["        else:", *calls("            ", training=False)])
    return lines


def _bprop(mode: str, fused, wired=None) -> tuple[str, list[str], list[str], list[str]]:
    """A module-level bprop factory for the forward program of `mode` (bprops.bprop_source's name, captured values,
    parameters and body): GRAPH_MODE compiles a bprop from its source, which must name every input (no *args).
    With `wired` (saved_in_library.SavedInLibrary), for the keeping forward program: the backward takes the
    forward's ticket first, and the saved tensors in the kept set are not passed."""
    n = fused.forward.num_inputs
    params = [f"a{i}" for i in range(n)]
    single_out = wired is None and fused.forward.num_outputs == 1  # the keeping program adds its ticket
    saved = [f"a{s.index}" if s.source is SavedFrom.INPUT else ("out" if single_out else f"out[{s.index}]")
             for k, s in enumerate(fused.saved) if wired is None or not wired.from_set(k)]
    ticket = [] if wired is None else [f"out[{wired.kept_from}]"]
    tangents = ["dout" if single_out else f"dout[{k}]" for k in fused.tangents]
    constants = [f"constants[{j}]" for j in range(len(fused.backward_constants))]
    call = f"backward({', '.join(ticket + saved + tangents + constants)})"
    grads = [f"_ops.zeros_like(a{i})" if g is None else f"g[{g}]" for i, g in enumerate(fused.grads)]
    body = [f"g = ({call},)" if fused.backward.num_outputs == 1 else f"g = {call}",
            f"return ({', '.join(grads)},)"]
    return f"{'_bprop' if wired is None else '_keeping_bprop'}_{mode}", ["backward", "constants"], params, body


def _inference_bprop(mode: str, fused) -> tuple[str, list[str], list[str], list[str]]:
    """A bprop factory for the inference program of `mode`, for a gradient asked in evaluation (an input's
    gradient for a saliency map): it runs the forward program again for the tensors the backward needs, then the
    backward program. The inference program's inputs are the forward program's per placeholder, then constants of
    its own (no gradient); the forward's own constants come with the factory."""
    placeholders = fused.inference_placeholders
    n = fused.inference.num_inputs
    params = [f"a{i}" for i in range(n)]
    forward_args = [f"a{i}" if i < placeholders else f"forward_constants[{i - placeholders}]"
                    for i in range(fused.forward.num_inputs)]
    single_forward = fused.forward.num_outputs == 1
    saved = [forward_args[s.index] if s.source is SavedFrom.INPUT else ("o" if single_forward else f"o[{s.index}]")
             for s in fused.saved]
    single_out = fused.inference.num_outputs == 1
    tangents = ["dout" if single_out else f"dout[{k}]" for k in fused.tangents]
    constants = [f"constants[{j}]" for j in range(len(fused.backward_constants))]
    grads = [f"_ops.zeros_like(a{i})" if i >= placeholders or fused.grads[i] is None else f"g[{fused.grads[i]}]"
             for i in range(n)]
    call = f"backward({', '.join(saved + tangents + constants)})"
    body = [f"o = forward({', '.join(forward_args)})",
            f"g = ({call},)" if fused.backward.num_outputs == 1 else f"g = {call}",
            f"return ({', '.join(grads)},)"]
    return f"_inference_bprop_{mode}", ["forward", "backward", "forward_constants", "constants"], params, body


def _input_check(module_name: str, spec) -> list[str]:
    """Checks that constant-fold in GRAPH_MODE (shapes and dtypes are known when the graph compiles). A direct
    call is checked in Python first (PortedCell.__call__), with the same words."""
    shape, x = spec.shape, spec.name
    if None in shape:
        conditions = [f"len({x}.shape) != {len(shape)}"] + [f"{x}.shape[{d}] != {n}" for d, n in enumerate(shape)
                                                             if n is not None]
    else:
        conditions = [f"{x}.shape != {tuple(shape)!r}"]
    return ["        if " + " or ".join(conditions) + ":",
            f"            raise ValueError({expected_shape(module_name, spec)!r} + str({x}.shape))",
            f"        if {x}.dtype != _ms.{_ms_dtype_attr(spec.dtype)}:",
            f"            raise TypeError({expected_dtype(module_name, spec)!r} + str({x}.dtype))"]


def expected_shape(module_name: str, spec) -> str:
    """The start of the error for an input of another shape (followed by the shape given)."""
    shape = spec.shape
    described = "(" + ", ".join("any" if n is None else str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"
    return (f"{module_name} was ported for input {spec.name} of shape {described}"
            + (" (a dimension shown as 'any' takes any size)" if None in shape else
               "; port it with aot_ops.from_torch(..., dynamic_batch=True) for other batch sizes") + "; got ")


def expected_dtype(module_name: str, spec) -> str:
    """The start of the error for an input of another dtype (followed by the dtype given): a cast in front of the
    cell (mixed precision casts inputs) or a port with an example of that dtype is the way out."""
    return (f"{module_name} was ported for input {spec.name} of dtype {ms_name(spec.dtype)}: cast the input to "
            f"{ms_name(spec.dtype)} (mixed precision such as ms.amp O2 casts a cell's inputs), or port the module "
            "with an example input of the dtype it will get; got ")


def _ms_dtype_attr(dtype: torch.dtype) -> str:
    name = ms_name(dtype)
    return "bool_" if name == "bool" else name


def _aten_op(op: Operator) -> str:
    try:
        args = [repr(op.target)] + [f"{k}={_literal(v)}" for k, v in op.fixed.items()]
    except PortError as exc:
        raise PortError(f"node '{op.name}' ({op.target}) at {op.source}: {exc}") from None
    if op.out_shapes is not None:
        if None in op.out_shapes:
            raise PortError(f"node '{op.name}' ({op.target}) at {op.source}: leaves an output uncomputed (None), "
                            "which a MindSpore operator with dynamic shapes cannot return; port with fuse=True, "
                            "or without dynamic_batch")
        args.append("out_shapes=" + _literal(op.out_shapes))
        args.append("out_dtypes=" + _literal(op.out_dtypes))
    if op.shape_inputs:
        args.append(f"shape_inputs={len(op.shape_inputs)}")
    if op.recompute:
        # an operator of a checkpointed region: MindSpore's autodiff computes it again for the backward instead
        # of keeping its result (in GRAPH_MODE: PyNative's autodiff of the cell's ms.jit graph ignores the mark)
        args.append("recompute=True")
    return f"aten.op({', '.join(args)})"


def _collective(step: Collective) -> str:
    """A MindSpore communication operator for a torch collective (distributed.py), named by where torch called it."""
    where = f"{step.name} ({step.module or '(root)'}: {step.source})"
    dtype = "" if step.dtype is None else f"dtype={step.dtype!r}, "
    return (f"collective_cell({step.kind!r}, {step.ranks!r}, reduce_op={step.reduce_op!r}, src={step.src!r}, "
            f"{dtype}where={where!r})")


def _literal(value: Any) -> str:
    """Python source for an aten.op argument."""
    if value is CALL_TIME:
        return "aten.INPUT"
    if isinstance(value, SizeExpr):
        return repr(value)
    if isinstance(value, torch.dtype):
        return str(value)  # torch.float32
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, (torch.layout, torch.memory_format)):
        return str(value)  # torch.strided, torch.contiguous_format
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
    if isinstance(value, (bool, int, str)) or value is None:
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    raise PortError(f"an operator argument {value!r} ({type(value).__name__}) cannot be written as aten.op source")


def _structure(spec, leaves) -> str:
    """The outputs rebuilt in the module's structure (a tensor, tuple, list or dict), from the pytree spec."""
    if spec.is_leaf():
        return next(leaves)
    children = [_structure(child, leaves) for child in spec.children()]
    if _is_dict(spec):
        for key in spec.context:
            if not isinstance(key, (str, int)):
                raise PortError(f"the module returns a dict with a {type(key).__name__} key; use str keys")
        return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(spec.context, children)) + "}"
    if spec.type is list:
        return "[" + ", ".join(children) + "]"
    if isinstance(spec.type, type) and issubclass(spec.type, tuple):  # a tuple, or a named tuple (its fields)
        return "(" + ", ".join(children) + ("," if len(children) == 1 else "") + ")"
    raise PortError(f"the module returns a {spec.type.__name__}; from_torch ports tensors, tuples, lists, dicts "
                    "and dict-like outputs (ModelOutput) of them")


def _clip(line: str) -> str:
    return line if len(line) <= _LINE else line[:_LINE - 3] + "..."


def _wrap(line: str, indent: str) -> list[str]:
    """A long call split after commas inside its parentheses (never inside a string literal)."""
    if len(line) <= _LINE:
        return [line]
    breaks, depth, quote, k = [], 0, None, 0
    while k < len(line):
        c = line[k]
        if quote:
            if c == "\\":
                k += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth > 0 and line[k + 1:k + 2] == " ":
            breaks.append(k + 1)
        k += 1
    lines, start, current = [], 0, ""
    for b in breaks + [len(line)]:
        piece = line[start:b]
        if current and len(current) + len(piece) > _LINE:
            lines.append(current.rstrip())
            current = indent + piece.lstrip()
        else:
            current += piece if current else piece
        start = b
    lines.append(current.rstrip())
    return lines
