"""aot_ops.from_torch: a torch.nn.Module as a MindSpore Cell, every node one bridged ATen operator.

    cell = aot_ops.from_torch(model, (x,))                     # PyNative and GRAPH_MODE, gradients, training

The pieces: export.py (torch.export at the functional level, decomposing only what the bridge refuses; a user's
torch.autograd.Function kept with its backward as one operator, functions.py),
graph.py (the exported graph read as aten.op calls, with every refusal named by node and source line), codegen.py
(the Cell's source, written to the build cache: GRAPH_MODE compiles from source), cell.py (structure, parameters,
buffers, weights both ways, training and evaluation).
"""
from __future__ import annotations

import inspect
import logging
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import torch
from torch.export import ExportedProgram

from . import layer_stack, plan_cache
from .cell import PortedCell, PortSpec, StateEntry
from .codegen import generate
from .errors import PortError
from .export import CACHE_ADVICE, Inputs, export
from .fan_out import fan_out_half_gradients
from .graph import Graph, read
from .layer_stack import LayerStack, StackExport
from .module_tree import Structure
from .modes import Mode, constant_attribute

__all__ = ["from_torch", "PortError", "PortedCell"]

log = logging.getLogger(__name__)


def from_torch(model: torch.nn.Module, args: Sequence[torch.Tensor] | torch.Tensor = (),
               kwargs: dict[str, Any] | None = None, *, dynamic_batch: bool = False, dynamic_shapes: Any = None,
               fuse: bool | str = False, input_grads: bool = True, jit: bool = True,
               evaluation_only: bool = False, share_weights: bool = False) -> PortedCell:
    """Ports `model` to a mindspore.nn.Cell computing what model(*args, **kwargs) computes.

    - `args`, `kwargs`: example inputs, as for torch.export. Tensors are the cell's inputs, in that order (args,
      then the tensor kwargs), named as the module's parameters (`cell(input_ids, attention_mask=mask)` works);
      other keyword values (`use_cache=False`, `return_dict=True`) are fixed into the port, as torch.export fixes
      them. The cell is called with MindSpore tensors of the same shapes and dtypes (any size along dimension 0
      with `dynamic_batch=True`, or as `dynamic_shapes` says, in torch.export's format). A call with other shapes
      is an error naming the expected and given shapes.
    - Outputs keep the module's structure: tensors, tuples, lists, dicts, and Hugging Face `ModelOutput`s (called
      from Python the cell returns the same ModelOutput class holding MindSpore tensors; inside another MindSpore
      graph, a dict with the same keys).
    - Parameters become mindspore.Parameters named after the state_dict keys, trainable as in torch; buffers become
      non-trainable Parameters, updated as torch updates them (BatchNorm's running statistics).
    - `cell.set_train(True/False)` switches between the module's training and evaluation behaviour; the cell starts
      in the mode the module is in. Random numbers cannot match torch: dropout with p > 0 (nn.Dropout, attention
      dropout) cannot run in training mode, so such a module is ported for evaluation only, or refused if it is in
      training mode.
    - `cell.load_torch_state_dict(sd)` / `cell.torch_state_dict()` move weights between the two frameworks.
    - `cell.source_file` is the generated source (one aten.op per torch node); print(cell) shows the structure.
    - `fuse=True`: the whole forward graph runs as ONE aot call and its backward (from torch's AOTAutograd) as
      one more, instead of one call per node: MindSpore's per-call dispatch is paid twice per training step.
      Also with dynamic_batch/dynamic_shapes (sizes are computed from the input shapes at run time). The traced
      programs are kept in the build cache by graph: a later port of the same graph (any weights, any process)
      skips AOTAutograd's trace, most of a training port's time (fused_cache.py; AOT_OPS_PORT_CACHE=0: off).
    - `fuse="compile"`: as fuse=True, with the graphs compiled ahead of time by torch's Inductor (AOTInductor) into
      fused CPU loops, run from C++ with no Python: the forward and backward of training when the cell first runs
      in training mode (here, if the module is training), the evaluation graph when it first runs in evaluation
      mode (set_train(False)). Compiling takes seconds to a minute per graph, once: packages are kept in the
      build cache (AOT_OPS_CACHE), keyed by the graph, torch, Inductor's settings, the thread count
      (torch.get_num_threads() at that time: the compiled loops keep it) and the compiler. A graph that does not
      compile runs interpreted, with a CompileFallbackWarning saying why. Static shapes only (dynamic_batch and
      dynamic_shapes are refused).
    - `input_grads=False`: the inputs are constants to autodiff (ops.stop_gradient: a gradient asked for them is
      zero), as in torch for inputs that do not require grad, and the fused backward does not compute them (the
      first convolution's input gradient cost a ported ResNet's step 1 ms). The default, True, gives every floating
      input its gradient, as ms.grad's default grad_position=0 expects.
    - `jit=True` (the default): in PyNative mode a call runs the cell as one compiled MindSpore graph (`ms.jit`),
      and its backward under MindSpore's autodiff as one more, instead of operator by operator through PyNative's
      queues (a plain training loop ran 2-3x faster and steadier). The first call with each input signature and
      mode (training, evaluation, under a gradient or not) compiles, as GRAPH_MODE does. `jit=False` runs the cell
      through PyNative as MindSpore runs any Cell, as does a cell with hooks registered; `cell.jit` can be changed
      later. GRAPH_MODE is not affected.
    - `evaluation_only=True`: the cell evaluates only: the training graph is neither exported nor traced, and
      fuse=True builds the inference program alone (no AOTAutograd): the port takes less time and memory, and
      `set_train(True)` raises. The default ports both, whichever mode the module is in; the export is then
      made functional by rewriting its in-place calls where that is exact, instead of retracing the module.
    - `share_weights=True`: the weights exist once. Each of the module's parameters and buffers becomes a view
      of its Parameter's memory as the cell is built (its own memory freed at once), so the port's peak stays
      near the weights' size and the module and the cell see each other's updates (a MindSpore optimizer step
      changes the torch module; `module.load_state_dict` changes the cell). Do not train both side by side then:
      port a copy (copy.deepcopy) for that. The default copies the weights into the cell (twice the memory
      while the torch module lives; deleting it gives its memory back).
    Raises PortError naming the torch node and its source line when something cannot be ported.
    """
    for name, value in (("evaluation_only", evaluation_only), ("share_weights", share_weights)):
        if not isinstance(value, bool):
            raise TypeError(f"from_torch: {name}={value!r}; give True or False")
    why = (f"{type(model).__name__} was ported with evaluation_only=True: the cell has no training graph; port it "
           "without evaluation_only to train it") if evaluation_only else None
    return port(model, args, kwargs, dynamic_batch=dynamic_batch, dynamic_shapes=dynamic_shapes, fuse=fuse,
                input_grads=input_grads, jit=jit, no_training=why, share_weights=share_weights)


def port(model: torch.nn.Module, args: Sequence[torch.Tensor] | torch.Tensor = (),
         kwargs: dict[str, Any] | None = None, *, dynamic_batch: bool = False, dynamic_shapes: Any = None,
         fuse: bool | str = False, input_grads: bool = True, jit: bool = True,
         no_training: str | None = None, compile_inputs: dict[str, tuple[int | None, ...]] | None = None,
         share_weights: bool = False, plan_key: str | None = None, export_two_layers: bool = False) -> PortedCell:
    """from_torch, and for ports made for one use (from_torch_lm: generation): `no_training`, why the cell has
    no training graph (the training graph is then neither traced nor checked, and no gradient is prepared: an
    inference-only cell); `compile_inputs`, with
    fuse="compile" and dynamic sizes, the input shapes the programs are compiled for (input name -> shape; a None
    size is compiled as dynamic, over its whole range; other sizes run interpreted); `plan_key`, a key that determines the port's plan (from_pretrained's, plan_cache.py):
    the plan kept under it is used instead of exporting and fusing, or made and kept; `export_two_layers`, the
    evaluation graph exported with two of the module's alike layers and the others copied into it (the layer stack
    stage, layer_stack.py: a model from_pretrained built, whose layers are transformers' own)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"from_torch: expected a torch.nn.Module, got {type(model).__name__}")
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    for k, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"from_torch: argument {k} is a {type(a).__name__}; give tensors as positional "
                            "arguments, and other values as keyword arguments (kwargs=...), which are fixed")
    tensor_kwargs, fixed_kwargs = _split_kwargs(kwargs or {})
    if dynamic_batch and dynamic_shapes is not None:
        raise TypeError("from_torch: give dynamic_batch or dynamic_shapes, not both")
    if not isinstance(jit, bool):
        raise TypeError(f"from_torch: jit={jit!r}; give True (PyNative calls run one compiled graph) or False")
    if fuse not in (False, True, "compile"):
        raise ValueError(f"from_torch: fuse={fuse!r}; give False (one aot call per node), True (one per graph) or "
                         "'compile' (one per graph, compiled by torch's Inductor)")
    if fuse == "compile" and (dynamic_batch or dynamic_shapes is not None) and compile_inputs is None:
        raise PortError("from_torch: fuse='compile' needs static shapes (AOTInductor compiles for the example's "
                        "sizes): port with fuse=True for dynamic_batch/dynamic_shapes, or port each size you need")
    if dynamic_batch:
        dynamic_shapes = _batch_dimensions(model, args, tensor_kwargs)
    inputs = Inputs(args, tensor_kwargs, fixed_kwargs)
    trainable = {key for key, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}

    kept_as = plan_key if fuse != "compile" else None  # (compiled programs are not kept)
    plan = plan_cache.read(kept_as) if kept_as else None
    if plan is None:
        # The stages, each taking the plan the one before made
        stack = _layer_stack(model) if export_two_layers else None
        plan = _exported(model, inputs, dynamic_shapes, no_training, fuse, trainable, input_grads, stack)
        plan = _one_graph_where_the_same(plan)
        if fuse:
            plan = _fused(plan, model, trainable, input_grads, compile_programs=fuse == "compile")
            if compile_inputs is not None:
                _set_compile_sizes(plan, compile_inputs)
        if kept_as:
            plan_cache.write(kept_as, plan)
    if not fuse and jit and plan.half_gradients_fanned_out:
        # MindSpore's autodiff of a PyNative ms.jit call sums a bfloat16 value's gradients itself (AddN, no
        # bfloat16 CPU kernel), which the per-node graph avoids (fan_out.py): such a cell runs operator by operator.
        log.warning("from_torch(%s): jit=True cannot apply: the port sums bfloat16 gradients per node, which "
                    "MindSpore's autodiff of one PyNative graph cannot; the cell runs operator by operator in "
                    "PyNative (cell.jit is False)", type(model).__name__)
        jit = False
    return _cell(model, plan, input_grads, fuse, jit, share_weights)


@dataclass
class _Use:
    """One graph the cell runs: for training, for evaluation, or for both when they are the same graph."""

    program: ExportedProgram | None  # torch.export's (None in a plan kept by plan_cache.py)
    graph: Graph              # read from it (graph.py)
    fused: Any = None         # with fuse: fused.FusedGraph, its programs
    functions: tuple = ()     # functions.FunctionOperator: the user's Functions it calls, held by the cell


@dataclass
class _Plan:
    """What the port produces, stage by stage: a use per mode; why the cell cannot train (None: it can); whether
    the programs get a backward (AOTAutograd's: gradients in either mode), which an evaluation-only port's do not;
    whether a per-node training graph had bfloat16 values fanned out (fan_out.py); the layer stack stage's
    outcome, where it ran (layer_stack.py)."""

    uses: dict[Mode, _Use]
    no_training: str | None
    backward: bool
    half_gradients_fanned_out: bool = False
    layer_stack: StackExport | None = None

    def evaluating_only(self, why: str) -> "_Plan":
        """The plan without a training graph: a graph shared by both modes becomes the evaluation graph, to be
        fused again without a backward (fused None); a separate evaluation graph keeps its programs."""
        if Mode.BOTH in self.uses:
            return _Plan({Mode.EVAL: replace(self.uses[Mode.BOTH], fused=None)}, why, backward=False)
        return _Plan({Mode.EVAL: self.uses[Mode.EVAL]}, why, backward=False)

    def graphs(self) -> dict[Mode, Graph]:
        return {mode: use.graph for mode, use in self.uses.items()}


def _layer_stack(model: torch.nn.Module) -> LayerStack | None:
    """The module's stack of alike layers, for the layer stack stage (layer_stack.py), or None (and why, logged)."""
    stack, why_none = layer_stack.search(model)
    if stack is None:
        log.debug("%s: no layers exported as two: %s", type(model).__name__, why_none)
    return stack


def _exported(model: torch.nn.Module, inputs: Inputs, dynamic_shapes: Any, no_training: str | None,
              fuse: bool | str, trainable: set[str], input_grads: bool, stack: LayerStack | None = None) -> _Plan:
    """The evaluation graph and, unless the port is for evaluation only, the training graph, each exported and
    read. A training graph that cannot be ported is an error for a module in training mode; for one in
    evaluation mode, the reason the cell cannot train. The exports are made functional by rewriting their
    in-place calls where that is exact (export.py), except a training graph differentiated node by node
    (fuse=False), whose per-node gradients were checked on torch's functionalisation only; such a graph has its
    bfloat16 values read several times fanned out before it is read (fan_out.py). `stack`: alike layers the
    evaluation graph is exported with two of, where the layer stack stage can copy the others (layer_stack.py)."""
    def exporting(training: bool):
        rewrite_in_place = bool(fuse) or no_training is not None
        return lambda module: export(module, inputs, dynamic_shapes, training=training,
                                     backward=no_training is None, rewrite_in_place=rewrite_in_place)

    def use(exported) -> _Use:
        return _Use(exported.program, read(exported.program, graph_shapes=fuse), functions=exported.functions)

    plan = _Plan({}, no_training, backward=no_training is None)
    if stack is not None:
        plan.layer_stack = layer_stack.export_as_two(model, stack, exporting(False))
        if not plan.layer_stack.expanded:
            log.debug("%s exported whole: %s", type(model).__name__, plan.layer_stack.why_whole)
    evaluation = plan.layer_stack.exported if plan.layer_stack and plan.layer_stack.expanded else None
    plan.uses[Mode.EVAL] = use(evaluation or exporting(False)(model))
    if no_training is None:
        try:
            training = exporting(True)(model)
            if not fuse:
                plan.half_gradients_fanned_out = fan_out_half_gradients(training.program, trainable,
                                                                        input_grads) > 0
            plan.uses[Mode.TRAIN] = use(training)
        except PortError as exc:
            if model.training:
                raise
            plan.no_training = _cannot_train_because(model, exc)
    return plan


def _one_graph_where_the_same(plan: _Plan) -> _Plan:
    """One graph for both modes where the training and evaluation graphs are the same (no dropout, no batch
    norm): a cell then compiles and runs one graph."""
    if Mode.TRAIN in plan.uses and _same(plan.uses[Mode.TRAIN].graph, plan.uses[Mode.EVAL].graph):
        return replace(plan, uses={Mode.BOTH: plan.uses[Mode.EVAL]})
    return plan


def _fused(plan: _Plan, model: torch.nn.Module, trainable: set[str], input_grads: bool,
           compile_programs: bool) -> _Plan:
    """Each use's programs (fused.py): with a backward from AOTAutograd where the cell trains (fused_cache.py
    keeps its trace), the inference program alone where it does not. A training graph whose backward cannot be
    traced (a Function's backward deciding on tensor values) leaves a module in evaluation mode ported for
    evaluation only: its plan then has no training graph, and the graph left is fused without a backward."""
    from .fused import fuse

    if plan.backward:
        cannot_train = _fused_with_backward(plan, model, trainable, input_grads, compile_programs)
        if cannot_train is None:
            return plan
        plan = plan.evaluating_only(_cannot_train_because(model, cannot_train))
    for mode, use in plan.uses.items():
        if use.fused is None:
            use.fused = fuse(use.program, use.graph, trainable, _label(model, mode), input_grads, backward=False)
    return plan


def _fused_with_backward(plan: _Plan, model: torch.nn.Module, trainable: set[str], input_grads: bool,
                         compile_programs: bool) -> PortError | None:
    """Each use fused with its backward; the error of a training graph whose backward cannot be traced, where the
    module may then be ported for evaluation only (a module in evaluation mode with a training graph), else None.
    Any other error is raised."""
    from . import fused_cache

    for mode, use in plan.uses.items():
        try:
            use.fused = fused_cache.fuse(use.program, use.graph, trainable, _label(model, mode), input_grads,
                                         keep_sources=compile_programs)
        except PortError as exc:
            if model.training or mode is Mode.EVAL or plan.no_training is not None:
                raise
            return exc
    return None


def _label(model: torch.nn.Module, mode: Mode) -> str:
    return f"{type(model).__name__} ({mode.label})"


def _cannot_train_because(model: torch.nn.Module, exc: PortError) -> str:
    return f"{type(model).__name__} was ported for evaluation only; training mode cannot run: {exc}"


def _set_compile_sizes(plan: _Plan, compile_inputs: dict[str, tuple[int | None, ...]]) -> None:
    for use in plan.uses.values():
        use.fused.compile_sizes = _size_values(use.program, compile_inputs)


def _cell(model: torch.nn.Module, plan: _Plan, input_grads: bool, fuse: bool | str, jit: bool,
          share_weights: bool) -> PortedCell:
    """The generated cell class (codegen.py) and its instance, holding the module's weights."""
    name = type(model).__name__
    graphs = plan.graphs()
    fused = {mode: use.fused for mode, use in plan.uses.items()} if fuse else {}
    modules = [(path, type(m).__name__) for path, m in model.named_modules()]
    state, initial_state = _state_entries(model)
    aliases = {e.key: e.alias_of for e in state if e.alias_of}
    structure = Structure(modules, (entry.key for entry in state))
    source = generate(_class_name(name), name, graphs, plan.no_training,
                      lambda key: structure.state_expression(aliases.get(key, key)), fused or None, input_grads,
                      backward=plan.backward)
    cls, path = _load_class(_class_name(name), source)
    first = next(iter(graphs.values()))
    spec = PortSpec(
        module_name=name, modules=modules, state=state,
        constants={constant_attribute(mode, k): v for mode, g in (fused or graphs).items()
                   for k, v in g.constants.items()},
        inputs=first.inputs, out_spec=first.out_spec, training=model.training and plan.backward,
        no_training=plan.no_training,
        operator_counts={mode: dict(Counter(op.module for op in g.operators)) for mode, g in graphs.items()},
        fused=fused, compile_on_first_use=fuse == "compile", jit=jit,
        functions=tuple({f for use in plan.uses.values() for f in use.functions}))
    cell = cls(spec, initial_state, share_weights)
    cell.source_file = str(path)
    return cell


_FIXED_TYPES = (bool, int, float, str, type(None))


def _split_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensor keyword arguments: inputs of the cell, other keyword arguments: fixed into the port)."""
    tensors, fixed = {}, {}
    for key, value in kwargs.items():
        if isinstance(value, torch.Tensor):
            tensors[key] = value
        elif isinstance(value, _FIXED_TYPES) or (isinstance(value, (tuple, list)) and
                                                 all(isinstance(v, _FIXED_TYPES) for v in value)):
            fixed[key] = value
        elif type(value).__module__.startswith("transformers.cache_utils"):
            raise PortError(f"from_torch: keyword argument '{key}': {CACHE_ADVICE}")
        else:
            raise TypeError(f"from_torch: keyword argument '{key}' is a {type(value).__name__}; give tensors (inputs "
                            "of the cell) or numbers, strings, bools and None (fixed into the port)")
    return tensors, fixed


def _batch_dimensions(model: torch.nn.Module, args: tuple, kwargs: dict[str, torch.Tensor]) -> dict[str, Any]:
    """torch.export's dynamic_shapes for a dynamic dimension 0 of every tensor input (0-dim ones stay static),
    keyed by the names of forward's parameters the inputs bind to (a **kwargs parameter gets a dict)."""
    batch = torch.export.Dim("batch")

    def spec(value):
        if isinstance(value, torch.Tensor):
            return {0: batch} if value.dim() > 0 else None
        if isinstance(value, dict):
            return {k: spec(v) for k, v in value.items()}
        if isinstance(value, (tuple, list)):
            return type(value)(spec(v) for v in value)
        return None

    bound = inspect.signature(model.forward).bind(*args, **kwargs)
    return {name: spec(value) for name, value in bound.arguments.items()}


def _size_values(program, shapes: dict[str, tuple[int | None, ...]]) -> dict:
    """Size symbol -> value, read off the exported program's user inputs given these shapes (None: a size left
    dynamic, compiled for its whole range)."""
    values = {}
    placeholders = {n.name: n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"}
    for spec in program.graph_signature.input_specs:
        shape = shapes.get(spec.arg.name) if spec.kind.name == "USER_INPUT" else None
        if shape is None:
            continue
        for size, value in zip(placeholders[spec.arg.name].shape, shape):
            if value is not None and isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                values[size.node.expr] = value
    return values


def _same(a: Graph, b: Graph) -> bool:
    return (a.steps == b.steps and a.outputs == b.outputs and a.buffer_updates == b.buffer_updates
            and a.state == b.state and a.constants.keys() == b.constants.keys()
            and all(torch.equal(a.constants[k], b.constants[k]) for k in a.constants))


def _state_entries(model: torch.nn.Module) -> tuple[list[StateEntry], dict[str, torch.Tensor]]:
    """Every parameter and buffer, persistent ones in state_dict order, tied tensors as aliases of the first key;
    and their tensors by key (the module's own tensor objects: the cell's initial values, which the port does not
    keep, and which become views of the cell's memory when weights are shared)."""
    entries: list[StateEntry] = []
    tensors: dict[str, torch.Tensor] = {}
    first_key: dict[int, str] = {}

    def add(key: str, tensor: torch.Tensor, persistent: bool):
        trainable = isinstance(tensor, torch.nn.Parameter) and tensor.requires_grad
        alias = first_key.setdefault(id(tensor), key)
        entries.append(StateEntry(key, trainable, persistent, None if alias == key else alias))
        tensors[key] = tensor

    persistent = model.state_dict(keep_vars=True)
    for key, tensor in persistent.items():
        add(key, tensor, True)
    for key, tensor in model.named_buffers(remove_duplicate=False):
        if key not in persistent:
            add(key, tensor, False)
    return entries, tensors


def _class_name(module_name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in module_name)
    return f"Ported{cleaned}"


def _load_class(class_name: str, source: str) -> tuple[type, Path]:
    """The generated class, from a file in the build cache named by the source's hash (GRAPH_MODE parses the
    source of construct, and needs its module importable by name)."""
    from .._build.generated import import_generated

    module, path = import_generated(class_name, source, folder="ported")
    return getattr(module, class_name), path
