"""An exported torch graph read as what the bridge runs: one ATen operator call per node.

`read(program)` turns a torch.export ExportedProgram (functional, see export.py) into a Graph: the user inputs,
the parameters and buffers it reads, the operator calls in order (each with the aten.op arguments that make its
MindSpore operator and the values it is called with), the outputs and the buffer updates. Everything the bridge
cannot run is reported here, naming the torch node and its source line.

Sizes that depend on the input shapes (a dynamic batch: torch's SymInts such as 16*s0) become size expressions
over the dimensions of each operator's own inputs (aten.size), which the kernel evaluates when it runs.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from ..._aten.argtypes import CALL_TIME, arg_type
from ..._aten.sizes import Size, SizeExpr, from_sympy, size
from ..._core.dtypes import has_ms_name
from ..._core.torch_private import OpOverload, schema_of
from ..errors import SPLIT_ADVICE, PortError, describe, module_of, source_line
from ..trace.checkpoints import region_of
from .collectives import Collective, is_collective, is_wait, read_collective
from ..trace.export import is_size, refusal


@dataclass
class Operator:
    """One bridged ATen call: `name = aten.op(target, **fixed)(*inputs)`."""

    name: str
    target: str                      # "aten::linear.default"
    fixed: dict[str, Any]            # aten.op keyword arguments: constants, None, aten.size expressions, INPUT lists
    inputs: list[str]                # the values it is called with, in schema order
    num_outputs: int | None          # None: one tensor; k: a tuple of k tensors
    out_shapes: list[list[Size]] | None  # for graphs whose shapes depend on the inputs (C++ shape inference)
    out_dtypes: list[torch.dtype] | None
    module: str                      # path of the torch module that made it ("" for the root)
    module_kind: str                 # its class name
    source: str                      # "model.py:12: y = self.fc(x)"
    # Sizes read dimensions of the graph's inputs too (index len(inputs) + k is graph input k): a program node whose
    # own inputs do not show a symbol (expand of a 0-dim gradient to the batch size); see read_module.
    reads_graph_inputs: bool = False
    # Graph inputs (value names) passed after `inputs` for their shapes only, where the sizes need a dimension of
    # the module's inputs that the operator's own inputs do not show (torch.arange(input_ids.shape[1])); see
    # aten.op's shape_inputs.
    shape_inputs: list[str] = field(default_factory=list)
    # Made inside a torch.utils.checkpoint region (trace/checkpoints.py): recomputed for the backward, not kept
    recompute: bool = False


@dataclass
class Item:
    """`name = of[index]`: one tensor of a multi-output operator."""

    name: str
    of: str
    index: int


@dataclass
class UserInput:
    name: str
    shape: tuple[int | None, ...]   # None: a dimension that may change from call to call
    dtype: torch.dtype


@dataclass
class Graph:
    inputs: list[UserInput]
    state: dict[str, str]                      # placeholder -> state_dict key (parameters and buffers)
    constants: dict[str, torch.Tensor]         # value name -> a tensor known now (lifted or folded constants)
    steps: list[Operator | Item | Collective] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)  # user outputs, in the order of `out_spec`'s leaves
    out_spec: Any = None
    buffer_updates: list[tuple[str, str]] = field(default_factory=list)  # (buffer key, value name)

    @property
    def operators(self) -> list[Operator]:
        return [s for s in self.steps if isinstance(s, Operator)]

    @property
    def collectives(self) -> list[Collective]:
        return [s for s in self.steps if isinstance(s, Collective)]

    @property
    def dynamic(self) -> bool:
        return any(d is None for i in self.inputs for d in i.shape)


_SKIPPED = {torch.ops.aten._assert_tensor_metadata.default, torch.ops.aten._assert_scalar.default,
            torch.ops.aten.sym_constrain_range_for_size.default, torch.ops.aten._assert_async.msg}


def read(program: ExportedProgram, graph_shapes: bool = False) -> Graph:
    """The graph of an exported program. `graph_shapes`: its nodes may take sizes from the shapes of any graph
    input, not only their own inputs' (as a program's nodes can; fuse=True)."""
    signature = program.graph_signature
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    graph = Graph(inputs=[], state={}, constants={})
    for spec, node in zip(signature.input_specs, placeholders):
        if spec.kind == InputKind.USER_INPUT:
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor):
                raise PortError(f"input '{node.name}' is not a tensor ({type(val).__name__}); from_torch ports "
                                "modules whose arguments are tensors (bind other arguments in a wrapper module)")
            graph.inputs.append(UserInput(node.name, tuple(d if isinstance(d, int) else None for d in val.shape),
                                          val.dtype))
        elif spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
            graph.state[node.name] = spec.target
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            graph.constants[node.name] = program.constants[spec.target]
        else:
            raise PortError(f"input '{node.name}' is a {spec.kind.name.lower()}, which from_torch cannot port")

    tensor_inputs = [node.meta.get("val") for node in placeholders]
    reader = _Reader.over(graph, program.graph, tensor_inputs if graph_shapes else None, tensor_inputs,
                          [node.name for node in placeholders])
    output_node = next(n for n in program.graph.nodes if n.op == "output")
    values = output_node.args[0]
    for spec, value in zip(signature.output_specs, values):
        if not isinstance(value, torch.fx.Node):
            raise PortError(f"output {spec.arg} is a constant ({value!r}), not a tensor; return tensors only")
        name = reader.value(value)
        if spec.kind == OutputKind.USER_OUTPUT:
            graph.outputs.append(name)
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            graph.buffer_updates.append((spec.target, name))
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            raise PortError(f"{describe(value)} modifies the input '{spec.target}' in place; MindSpore tensors "
                            "passed to a Cell cannot be changed by it: compute a new tensor and return it instead")
        else:
            raise PortError(f"{describe(value)} modifies {spec.target} in place ({spec.kind.name.lower()}), which "
                            "from_torch cannot port")
    graph.out_spec = program.call_spec.out_spec
    return graph


def _split_arguments(node: torch.fx.Node) -> tuple[dict[str, Any], list[torch.fx.Node], dict[str, Any]]:
    """An ATen call's arguments by what they become: (fixed values, by name; the tensor nodes left for call time,
    in order; sizes computed from input shapes, by name)."""
    schema = schema_of(node.target)
    fixed: dict[str, Any] = {}
    inputs: list[torch.fx.Node] = []
    symbolic: dict[str, Any] = {}
    positional = [a for a in schema.arguments if not a.kwarg_only]
    given = {a.name: v for a, v in zip(positional, node.args)}
    given.update(node.kwargs)
    for arg in schema.arguments:
        if arg.is_out:
            continue
        if arg.name not in given:
            if arg_type(arg)[0].tensors:
                fixed[arg.name] = None  # a default None, not a tensor left for call time
            continue
        value = given[arg.name]
        if isinstance(value, torch.fx.Node) and isinstance(value.meta.get("val"), torch.Tensor):
            inputs.append(value)  # a call-time input: aten.op leaves Tensor arguments open
        elif isinstance(value, (list, tuple)) and any(isinstance(v, torch.fx.Node) and
                                                       isinstance(v.meta.get("val"), torch.Tensor) for v in value):
            fixed[arg.name] = [None if v is None else CALL_TIME for v in value]
            inputs.extend(v for v in value if v is not None)
        elif _is_symbolic(value):
            symbolic[arg.name] = value
        else:
            fixed[arg.name] = value
    return fixed, inputs, symbolic


class _Reader:
    def __init__(self, graph: Graph, graph_inputs: list | None = None, all_inputs: list | None = None,
                 all_names: list[str] | None = None):
        self.graph = graph
        self.aliases: dict[str, str] = {}    # identity nodes (dropout that draws nothing) -> what they return
        # The graph inputs' values, where a node may also read their shapes (a program: program.cpp); None: a
        # node's sizes come from its own inputs only (one aot call per node)
        self.graph_inputs = graph_inputs
        # Every graph input's value, to explain a size that only another input's shape gives (per node)
        self.all_inputs = all_inputs or []
        self.all_names = all_names or []  # their placeholder names

    @classmethod
    def over(cls, graph: Graph, fx_graph: torch.fx.Graph, graph_inputs: list | None = None,
             all_inputs: list | None = None, all_names: list[str] | None = None) -> "_Reader":
        """A reader that has visited every call of `fx_graph`, its steps added to `graph`."""
        reader = cls(graph, graph_inputs, all_inputs, all_names)
        for node in fx_graph.nodes:
            if node.op == "call_function":
                reader.visit(node)
        return reader

    def value(self, node: torch.fx.Node) -> str:
        return self.aliases.get(node.name, node.name)

    def visit(self, node: torch.fx.Node) -> None:
        target = node.target
        val = node.meta.get("val")
        if target in _SKIPPED or (val is None and not node.users):
            return  # assertions torch.export adds
        if is_size(node):
            return  # a size (sym_size, s0 * 16): used through its expression where an operator needs it
        if target is operator.getitem:
            source = node.args[0]
            if source.name in self.aliases:  # element 0 of a dropout that draws nothing
                self.aliases[node.name] = self.aliases[source.name]
                return
            self.graph.steps.append(Item(node.name, self.value(source), int(node.args[1])))
            return
        if not isinstance(target, OpOverload):
            raise PortError(f"{describe(node)}: {getattr(target, '__name__', target)} is not an ATen operator; "
                            "from_torch ports graphs of ATen operators (no control-flow operators or Python calls)")
        if isinstance(val, (torch.SymFloat, torch.SymBool, float, bool)):
            raise PortError(f"{describe(node)} computes a Python number from tensor values (data-dependent); "
                            "keep the computation in tensors")
        if is_wait(target):  # a collective's result, ready when MindSpore's operator returns it
            self.aliases[node.name] = self.value(node.args[0])
            return
        if is_collective(target):
            self.graph.steps.append(read_collective(node, self.value(node.args[0])))
            return
        why = refusal(node)
        if why is not None:
            hint = _HINTS.get(target, SPLIT_ADVICE if torch.Tag.dynamic_output_shape in target.tags else "")
            raise PortError(f"{describe(node)} cannot be bridged: {why}{hint}")
        if target in (torch.ops.aten.native_dropout.default, torch.ops.aten.dropout.default):
            self._identity(node)
            return
        self._check_dtypes(node, val)
        self._operator(node, val)

    def _identity(self, node: torch.fx.Node) -> None:
        """Dropout that draws nothing: its output is its input (native_dropout's mask is never read here)."""
        source = self.value(node.args[0])
        if node.target == torch.ops.aten.native_dropout.default:
            for user in node.users:
                if user.target is operator.getitem and user.args[1] != 0:
                    raise PortError(f"{describe(user)} reads the dropout mask, which from_torch does not provide")
        self.aliases[node.name] = source

    def _check_dtypes(self, node: torch.fx.Node, val) -> None:
        for t in _tensors(val):
            if not has_ms_name(t.dtype):
                raise PortError(f"{describe(node)} produces a {t.dtype} tensor, which MindSpore has no dtype for")

    def _operator(self, node: torch.fx.Node, val) -> None:
        schema = schema_of(node.target)
        fixed, inputs, symbolic = _split_arguments(node)
        input_vals = [n.meta["val"] for n in inputs]
        outputs = list(val) if isinstance(val, (tuple, list)) else [val]
        dynamic = any(has_symbols(t.shape) for t in input_vals + outputs if isinstance(t, torch.Tensor))
        if not inputs and not symbolic:
            self._constant(node)
            return
        bindings = bind_symbols(input_vals)
        reads_graph_inputs = False
        shape_inputs: list[str] = []
        needed = _free_symbols(list(symbolic.values()) + [list(t.shape) for t in _tensors(val)])
        if not needed <= set(bindings):
            if self.graph_inputs is not None:  # a program: every node may read the graph inputs' shapes
                bindings = bind_symbols(input_vals + self.graph_inputs)  # its own inputs first
                reads_graph_inputs = True
            else:  # one operator: the graph inputs that show the missing sizes come along for their shapes
                shape_inputs = self._shape_sources(needed - set(bindings))
                bindings = bind_symbols(input_vals + [self.all_inputs[self.all_names.index(n)] for n in shape_inputs])
        for name, value in symbolic.items():
            fixed[name] = self._size(node, value, bindings)
        out_shapes = out_dtypes = None
        if dynamic or symbolic:
            # An output the operator does not compute (None: a layer norm without weights has no weight gradient)
            # has no shape; only a program, which keeps it as an undefined tensor, can run such an operator.
            out_shapes = [None if t is None else [self._size(node, d, bindings) for d in t.shape] for t in outputs]
            out_dtypes = [None if t is None else t.dtype for t in outputs]
        path, kind = module_of(node)
        overload = schema.overload_name or "default"
        self.graph.steps.append(Operator(
            name=node.name, target=f"{schema.name}.{overload}", fixed=fixed, inputs=[self.value(n) for n in inputs],
            num_outputs=len(val) if isinstance(val, (tuple, list)) else None, out_shapes=out_shapes,
            out_dtypes=out_dtypes, module=path, module_kind=kind, source=source_line(node, short=True),
            reads_graph_inputs=reads_graph_inputs, shape_inputs=shape_inputs,
            recompute=region_of(node) is not None))

    def _shape_sources(self, symbols: set) -> list[str]:
        """Names of graph inputs whose shapes show `symbols` (sizes of the graph's inputs), fewest first: each is
        passed to the operator only for its shape (aten.op's shape_inputs)."""
        chosen: list[str] = []
        for name, value in zip(self.all_names, self.all_inputs):
            if not symbols:
                break
            if isinstance(value, torch.Tensor):
                shown = _free_symbols([list(value.shape)]) & symbols
                if shown:
                    chosen.append(name)
                    symbols = symbols - shown
        return chosen

    def _constant(self, node: torch.fx.Node) -> None:
        """A factory (torch.zeros, arange) of fixed size: computed now, a constant of the cell."""
        self.graph.constants[node.name] = node.target(*node.args, **node.kwargs)

    def _size(self, node: torch.fx.Node, value, bindings) -> Any:
        try:
            if isinstance(value, (list, tuple)):
                return [self._size(node, v, bindings) for v in value]
            if isinstance(value, torch.fx.Node):
                value = value.meta["val"]
            if isinstance(value, torch.SymInt):
                return from_sympy(value.node.expr, bindings)
            return value
        except ValueError as exc:
            try:
                from_sympy(value.node.expr, bind_symbols(self.all_inputs))
            except (ValueError, AttributeError):
                raise PortError(f"{describe(node)}: {exc} (a size computed from tensor values is data-dependent; "
                                "from_torch needs sizes given by the input shapes)") from None
            raise PortError(f"{describe(node)}: its size {value} is a dimension of another input of the module, "
                            "which an operator per node cannot read; port with fuse=True (one program reads every "
                            "input's shape), or with static shapes") from None


_ATTENTION_DROPOUT = (". Set the attention dropout to 0 for training (dropout_p=0; "
                      "in a transformers config attention_dropout, attention_probs_dropout_prob or attn_pdrop), or use "
                      "the ported cell for evaluation only (cell.set_train(False))")
# An output sized by values (nonzero, a boolean mask, torchvision's nms): the whole graph cannot be one MindSpore
# graph, whose operators need their output shapes before they run; split at such operators, it can.
_HINTS = {
    torch.ops.aten.native_dropout.default: ". Random numbers cannot match torch: set the dropout probability to 0 "
    "for training (for m in model.modules(): if isinstance(m, nn.Dropout): m.p = 0.0), or use the ported cell for "
    "evaluation only (cell.set_train(False))",
    torch.ops.aten.scaled_dot_product_attention.default: _ATTENTION_DROPOUT,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default: _ATTENTION_DROPOUT,
    torch.ops.aten._scaled_dot_product_attention_math.default: _ATTENTION_DROPOUT,
}


def _tensors(val) -> list[torch.Tensor]:
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (tuple, list)):
        return [t for t in val if isinstance(t, torch.Tensor)]
    return []


def _is_symbolic(value) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_is_symbolic(v) for v in value)
    if isinstance(value, torch.fx.Node):
        return isinstance(value.meta.get("val"), torch.SymInt)
    return isinstance(value, torch.SymInt)


def _free_symbols(values) -> set:
    """The symbols the sizes among `values` (SymInts, nodes holding one, nested lists) depend on."""
    if isinstance(values, (list, tuple)):
        return set().union(*(_free_symbols(v) for v in values)) if values else set()
    if isinstance(values, torch.fx.Node):
        values = values.meta.get("val")
    return set(values.node.expr.free_symbols) if isinstance(values, torch.SymInt) else set()


def has_symbols(shape) -> bool:
    return any(isinstance(d, torch.SymInt) and not d.node.expr.is_number for d in shape)


def bind_symbols(input_vals: list) -> dict[sympy.Symbol, SizeExpr]:
    """Each symbol of the input shapes bound to an input dimension that equals it: a dimension that is the symbol
    itself, else one that is a multiple of it (16*s0 gives s0 = dim // 16) or it plus a constant."""
    bindings: dict[sympy.Symbol, Size] = {}
    derived: dict[sympy.Symbol, Size] = {}
    for i, t in enumerate(input_vals):
        if not isinstance(t, torch.Tensor):
            continue
        for d, dim in enumerate(t.shape):
            if not isinstance(dim, torch.SymInt):
                continue
            expr = dim.node.expr
            if isinstance(expr, sympy.Symbol):
                bindings.setdefault(expr, size(i, d))
            elif len(expr.free_symbols) == 1:
                (symbol,) = expr.free_symbols
                coeff, rest = expr.as_coeff_Mul()
                if rest == symbol and coeff.is_Integer and coeff > 0:
                    derived.setdefault(symbol, size(i, d) // int(coeff))
                elif expr.is_Add:
                    const, rest = expr.as_coeff_Add()
                    if rest == symbol and const.is_Integer:
                        derived.setdefault(symbol, size(i, d) - int(const))
    for symbol, value in derived.items():
        bindings.setdefault(symbol, value)
    return bindings


def read_module(module: torch.fx.GraphModule) -> tuple[Graph, list[str], list[str | None]]:
    """A plain fx graph of ATen calls (AOTAutograd's forward or backward graph), to run as one program ->
    (graph, its tensor placeholders in order, its outputs in order: value names, None where the graph returns
    None). Size placeholders (SymInts AOTAutograd saves for the backward) are not inputs: every size is computed
    from tensor shapes, a node's own or, where those do not show it, the graph's tensor inputs'."""
    graph = Graph(inputs=[], state={}, constants={})
    placeholders, values = [], []
    for node in module.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                placeholders.append(node.name)
                values.append(val)
                graph.inputs.append(UserInput(node.name, tuple(d if isinstance(d, int) else None for d in val.shape),
                                              val.dtype))
            elif not isinstance(val, (torch.SymInt, int)):
                raise PortError(f"the graph takes {node.name}, a {type(val).__name__}, neither a tensor nor a size")
    reader = _Reader.over(graph, module.graph, values)
    output_node = next(n for n in module.graph.nodes if n.op == "output")
    values = output_node.args[0]
    outputs: list[str | None] = []
    for value in values if isinstance(values, (tuple, list)) else [values]:
        if value is None:
            outputs.append(None)
        elif isinstance(value, torch.fx.Node):
            outputs.append(reader.value(value))
        else:
            raise PortError(f"the graph returns a constant ({value!r}), not a tensor")
    return graph, placeholders, outputs
