"""from_torch(..., fuse=True): a mode's whole graph as two aot calls, the forward and its backward.

torch's AOTAutograd traces the exported (functional) graph jointly with its backward and partitions the two, so
torch decides what the backward needs: the saved tensors travel from the forward call to the backward call as
extra outputs of the forward, which MindSpore keeps for the bprop like any operator output (the same in both
modes; nothing outlives MindSpore's own bookkeeping). A saved tensor that is a forward input is taken from the
bprop's own inputs instead of being copied out. Each graph becomes one program (program.py) that the bundled
library runs through the c10 dispatcher, parsed once.

With a dynamic batch, AOTAutograd traces the exported graph's own symbolic example values (torch.export's fake
tensors), so both graphs keep the batch as a symbol. The sizes AOTAutograd saves for the backward are not passed:
the programs compute every size from tensor shapes at run time (graph.read_module).
"""
from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field, replace
from typing import Callable

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from ..._aten.sizes import from_sympy
from ..._core.torch_private import detect_fake_mode, is_view, repeated_regions_traced_once
from ..errors import PortError, raised_by_aot_ops
from ..read.graph import Graph, bind_symbols, read_module
from ..trace.checkpoints import has_checkpoints, recompute_marked
from ..trace.fake import mode_of
from .buffer_writes import written_in_place
from .compiled import TRAINING_CONFIGS, GraphSource, inference_configs
from .layers_traced_once import inline_regions, with_repeated_regions
from .program import Program, build, views_as_reshapes
from .program_inputs import Origin, ProgramInput, Saved, SavedFrom


@dataclass
class FusedGraph:
    """The two programs of one mode, and how the cell wires them."""

    forward: Program | None                   # None: ported for inference only (the inference program runs)
    backward: Program | None                  # None: no output is differentiable, or inference only
    inputs: list[ProgramInput]                # the forward program's inputs, in order
    constants: dict[str, torch.Tensor]        # the value of every constant input of the mode's programs, by name
    buffer_updates: list[tuple[str, int]]     # (buffer key, forward output position)
    user_outputs: list[int]                   # forward output positions of the module's outputs, in pytree order
    saved: list[Saved] = field(default_factory=list)  # what the backward takes before the cotangents
    tangents: list[int] = field(default_factory=list)  # forward output positions whose cotangents the backward takes
    grads: list[int | None] = field(default_factory=list)  # per forward input: backward output index, or None (zero)
    backward_constants: list[ProgramInput] = field(default_factory=list)  # taken after the cotangents
    # The exported graph alone as one program: the same leading outputs as `forward` (buffer updates and the
    # module's outputs), nothing saved for a backward. Evaluation runs it: a forward program's saved activations
    # are extra outputs MindSpore allocates and the program copies on every call (BERT's forward returns 41
    # tensors for its 2 outputs).
    inference: Program | None = None
    inference_inputs: list[ProgramInput] = field(default_factory=list)  # as `inputs`, for `inference`
    # As buffer_updates and user_outputs, for `inference`: an inference-only program writes its buffer updates
    # into the buffers itself (buffer_writes.py), returning the module's outputs alone.
    inference_buffer_updates: list[tuple[str, int]] = field(default_factory=list)
    inference_user_outputs: list[int] = field(default_factory=list)
    inference_writes: list[str] = field(default_factory=list)  # buffer keys the inference program writes itself
    # Each program's graph as a torch module, for fuse="compile" (compiled.py): "forward", "backward", "inference".
    sources: dict[str, GraphSource] = field(default_factory=dict, repr=False)
    # With dynamic sizes: the value each size symbol takes in the one signature fuse="compile" compiles (the other
    # sizes run the interpreted nodes, which the program keeps).
    compile_sizes: dict | None = None

    @property
    def forward_constants(self) -> list[ProgramInput]:
        """The constants the forward program takes after the exported graph's placeholders."""
        return [i for i in self.inputs if i.origin is Origin.FORWARD]

    @property
    def inference_placeholders(self) -> int:
        """How many of the inference program's inputs are the exported graph's placeholders (the forward program
        takes the same ones first); the rest are constants of its own."""
        return sum(1 for i in self.inference_inputs if i.origin is not Origin.INFERENCE)

    def to_keep(self) -> "FusedGraph":
        """The programs without their torch modules (`sources`: for fuse="compile" only, they do not pickle), as
        the build cache keeps them (fused_cache.py, plan_cache.py)."""
        return replace(self, sources={})

def fuse(program: ExportedProgram, graph: Graph, trainable: set[str], label: str,
         input_grads: bool = True, backward: bool = True) -> FusedGraph:
    """The forward and backward programs of `program` (from export.export); `trainable`: the state keys of the
    parameters that get gradients; `label` names them in errors.
    `input_grads=False`: the backward computes no gradient for the user inputs (only for trainable parameters).
    `backward=False`: the inference program alone (no gradient will be asked: AOTAutograd is not run)."""
    output_specs = program.graph_signature.output_specs
    if not backward:
        fused = FusedGraph(None, None, [], {}, _buffer_updates(output_specs), _user_outputs(output_specs))
        _add_inference(fused, program, graph, label, write_buffers=True)
        return fused
    joint = trace_joint(program.graph_module, _flat_inputs(program, trainable, input_grads), label)
    inputs = [_program_input(spec) for spec in program.graph_signature.input_specs]
    fused, forward = forward_program(joint, label, inputs, _buffer_updates(output_specs), _user_outputs(output_specs))
    _add_inference(fused, program, graph, label)
    if "backward" in joint.captured:
        add_backward(fused, joint, forward, label)
    return fused


@dataclass
class _JointTrace:
    """What AOTAutograd made of the exported graph: its forward and backward graphs, and which of the outputs
    (those AOTAutograd saw, before the saved tensors) are differentiable."""

    captured: dict[str, torch.fx.GraphModule]
    num_outputs: int
    differentiable: list[int]


def trace_joint(graph_module: torch.fx.GraphModule, flat: list, label: str) -> _JointTrace:
    """AOTAutograd's forward and backward graphs of an exported graph (or a piece of one: pieces.py), traced on
    fake `flat` inputs (the partition decides what the backward saves, and recomputes the user's checkpointed
    regions: _partition); each saved tensor saved once (_save_each_tensor_once)."""
    from functorch.compile import aot_function, make_boxed_func

    captured: dict[str, torch.fx.GraphModule] = {}

    def capture(name):
        def compiler(gm, _inputs):
            captured[name] = gm
            return make_boxed_func(_recorded_results(gm))
        return compiler

    checkpointed = has_checkpoints(graph_module.graph)
    module = _graph_to_trace(graph_module, checkpointed)
    # A checkpointed region is recomputed by the partition of the whole joint graph: repeated layers are then
    # traced as they come (torch partitions a repeated region on its own, where the marks are not seen)
    regions = None if checkpointed else \
        with_repeated_regions(module, [isinstance(v, torch.Tensor) and v.requires_grad for v in flat])
    module = regions or module

    def run(*values):  # an Interpreter keeps each node's stack trace on the traced nodes (errors name the source)
        outs = torch.fx.Interpreter(module).run(*values)
        if isinstance(outs, (tuple, list)):
            return type(outs)(_unaliased(o, values) for o in outs)
        return _unaliased(outs, values)

    compiled = aot_function(run, fw_compiler=capture("forward"), bw_compiler=capture("backward"),
                            partition_fn=_partition)
    try:
        traced_once = (repeated_regions_traced_once(detect_fake_mode(flat), inline_regions) if regions
                       else contextlib.nullcontext())
        with torch.fx.traceback.preserve_node_meta(), mode_of(flat), traced_once:
            outs = compiled(*flat)
            outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            differentiable = [k for k, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.requires_grad]
            if differentiable:
                torch.autograd.backward([outs[k] for k in differentiable],
                                        [torch.ones_like(outs[k]) for k in differentiable])
    except PortError:
        raise
    except Exception as exc:  # torch's tracing errors: what failed, in torch's words
        if raised_by_aot_ops(exc):
            raise  # a bug or a check of ours: with its own type and traceback, not labelled torch's
        raise PortError(f"AOTAutograd could not trace {label}: {type(exc).__name__}: {exc}") from exc
    joint = _JointTrace(captured, len(outs), differentiable)
    _save_each_tensor_once(joint)
    return joint


def _partition(joint: torch.fx.GraphModule, joint_inputs, **options):
    """The forward and backward graphs cut out of the joint graph by torch.compile's min-cut partition, after the
    nodes of the user's checkpointed regions are tagged for recomputation (checkpoints.py). It saves the fewest
    bytes from which the backward can recompute what it needs with cheap operators (pointwise, views; never a
    random one, a matrix product or a reduction), where AOTAutograd's default partition saves every forward value
    the backward reads. A fused program saves its values as MindSpore buffers held until the backward program
    ends, so what is saved decides the step's peak: the Llama of benchmarks/training_memory.py (8 layers, 4 x 512
    tokens) trains in GRAPH_MODE at 1.29 GB where the default partition held 2.06 GB and torch's eager autograd
    1.57 GB, and its step is no slower (docs/performance.md#training-memory). Programs AOTInductor compiles
    (fuse="compile") are cut the same way."""
    from functorch.compile import min_cut_rematerialization_partition

    recompute_marked(joint)
    options.pop("static_lifetime_input_nodes", None)  # the default partition's alone
    return min_cut_rematerialization_partition(joint, joint_inputs, compiler="inductor", **options)


def _recorded_results(module: torch.fx.GraphModule) -> Callable:
    """A stand-in for running a captured graph on the fake inputs: its results made from the values the trace
    recorded for them (sizes in the same symbols). The trace runs the forward, and the backward, only for
    AOTAutograd to hand over the backward graph and to say which outputs are differentiable, which the graph's
    values do not decide: running the 2,500 fake operators of a 22-layer Llama's forward and 4,000 of its backward
    took a third of the trace."""
    recorded = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in module.graph.output_node().args[0]]

    def results(*_inputs):
        return [torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device)
                if isinstance(v, torch.Tensor) else v for v in recorded]
    return results


_VIEWS = {torch.ops.aten.t.default, torch.ops.aten.transpose.int, torch.ops.aten.permute.default,
          torch.ops.aten.alias.default, torch.ops.aten.unsqueeze.default, torch.ops.aten.squeeze.dim,
          torch.ops.aten.expand.default, torch.ops.aten.view.default, torch.ops.aten.slice.Tensor,
          torch.ops.aten.select.int, torch.ops.aten.detach.default}


def _save_each_tensor_once(joint: _JointTrace) -> None:
    """A saved tensor that is a view of a forward input or of another saved tensor would be an output of the
    forward program, and a program's output is a tensor of its own (MindSpore's buffer): a copy per step. Views of
    inputs: a linear layer's transposed weight, which the backward multiplies by (a LoRA step on a frozen 1.1B model
    held its weights twice); views of saved values: AOTAutograd's default partition saves an activation and its
    `detach` both (tanh's output for the next layer's weight gradient, its detached alias for tanh's own backward),
    which held every such activation twice; and views of the module's outputs (a last tanh's output, detached for
    its backward). The base is saved instead (a saved input is passed as it is, a saved value or an output once),
    and the backward makes the view again from it. Views with sizes computed at run time are left saved."""
    forward, backward = joint.captured["forward"], joint.captured.get("backward")
    if backward is None:
        return
    output = forward.graph.output_node()
    outs = list(output.args[0])
    saved = {n.name: n for n in backward.graph.nodes if n.op == "placeholder"}
    taken: dict[str, torch.fx.Node] = {}  # input name -> its placeholder in the backward
    drop: list[int] = []
    for k in range(joint.num_outputs, len(outs)):
        chain, base = [], outs[k]
        while (isinstance(base, torch.fx.Node) and base.op == "call_function" and base.target in _VIEWS
               and not _reads_nodes((base.args[1:], base.kwargs))):
            chain.append(base)
            base = base.args[0]
        view = saved.get(getattr(outs[k], "name", None))
        if not chain or view is None or not (base.op == "placeholder" or base.name in saved
                                             or base in outs[:joint.num_outputs]):
            continue
        source = taken.get(base.name) or saved.get(base.name)
        if source is None:
            with backward.graph.inserting_before(view):
                source = backward.graph.placeholder(base.name)
            if source.name != base.name:  # the name is taken in the backward: leave this one saved
                backward.graph.erase_node(source)
                continue
            source.meta = dict(base.meta)
            outs[k] = base
        else:
            drop.append(k)  # saved already: the view goes
        taken[base.name] = source
        first_step = next(n for n in backward.graph.nodes if n.op != "placeholder")
        with backward.graph.inserting_before(first_step):
            value = source
            for node in reversed(chain):
                value = backward.graph.call_function(node.target, (value, *node.args[1:]), dict(node.kwargs))
                value.meta = dict(node.meta)
        view.replace_all_uses_with(value)
        backward.graph.erase_node(view)
    if not taken:
        return
    output.args = (tuple(o for k, o in enumerate(outs) if k not in drop),)
    for module in (forward, backward):
        module.graph.lint()
        module.recompile()


def _reads_nodes(arguments) -> bool:
    """Whether arguments (nested in lists and dicts) take another node's value: a size computed at run time."""
    found = []
    torch.fx.node.map_arg(arguments, found.append)
    return bool(found)


@dataclass
class _ForwardWiring:
    """How the forward program's values are named, for the backward's wiring."""

    inputs: list[str]        # the forward graph's placeholders
    outputs: list[str]       # the program's outputs: the module's, then the saved tensors that are no input
    saved: list[str]         # the tensors the backward takes before the cotangents
    num_constants: int       # constants the forward program takes after its placeholders


def forward_program(joint: _JointTrace, label: str, inputs: list[ProgramInput], buffer_updates: list[tuple[str, int]],
                    user_outputs: list[int]) -> tuple[FusedGraph, _ForwardWiring]:
    """The FusedGraph with the forward program: the graph's outputs, then the tensors saved for the backward.
    `inputs`: what each placeholder of the traced graph is; `buffer_updates`, `user_outputs`: which of its outputs
    are buffers' new values and which the module's (FusedGraph's fields)."""
    fgraph, fnames, fouts = read_module(joint.captured["forward"])
    num_real = joint.num_outputs
    nodes = {n.name: n for n in joint.captured["forward"].graph.nodes}
    saved_names = [n for n in fouts[num_real:] if isinstance(nodes[n].meta.get("val"), torch.Tensor)]  # not sizes
    f_inputs = fnames + list(fgraph.constants)
    # A saved tensor that is an input is passed as it is; one that is an output of the module is that output
    own = set(fnames) | set(fouts[:num_real])
    f_outputs = list(fouts[:num_real]) + [n for n in saved_names if n not in own]
    forward = build(f"{label} forward", fgraph, f_inputs, f_outputs, *output_shapes(nodes, f_outputs, fnames))
    f_picks = list(range(num_real)) + [k for k, n in enumerate(fouts) if k >= num_real and n in saved_names
                                       and n not in own]
    forward_constants = [ProgramInput.constant(Origin.FORWARD, n) for n in fgraph.constants]
    constants = {i.name: t for i, t in zip(forward_constants, fgraph.constants.values())}
    fused = FusedGraph(forward, None, inputs + forward_constants, constants, buffer_updates, user_outputs)
    fused.sources["forward"] = GraphSource(joint.captured["forward"], len(fnames), f_picks,
                                           input_examples(nodes, fnames, fgraph.constants), TRAINING_CONFIGS)
    return fused, _ForwardWiring(fnames, f_outputs, saved_names, len(fgraph.constants))


def add_backward(fused: FusedGraph, joint: _JointTrace, forward: _ForwardWiring, label: str) -> None:
    """The backward program (saved tensors, then the cotangents of the differentiable outputs, then its constants;
    a gradient per forward input that gets one) and how the bprop wires it."""
    bgraph, bnames, bouts = read_module(joint.captured["backward"])
    saved_names, differentiable = forward.saved, joint.differentiable
    if bnames[:len(saved_names)] != saved_names or len(bnames) != len(saved_names) + len(differentiable):
        raise PortError(f"{label}: the backward takes {len(bnames)} tensors, expected the {len(saved_names)} saved "
                        f"ones and {len(differentiable)} cotangents")
    if len(bouts) != len(forward.inputs):
        raise PortError(f"{label}: the backward returns {len(bouts)} gradients for {len(forward.inputs)} inputs")
    bnodes = {n.name: n for n in joint.captured["backward"].graph.nodes}
    b_outputs = [n for n in bouts if n is not None]
    b_inputs = bnames + list(bgraph.constants)
    fused.backward = build(f"{label} backward", bgraph, b_inputs, b_outputs, *output_shapes(bnodes, b_outputs, bnames))
    fused.sources["backward"] = GraphSource(joint.captured["backward"], len(bnames),
                                            [k for k, n in enumerate(bouts) if n is not None],
                                            input_examples(bnodes, bnames, bgraph.constants), TRAINING_CONFIGS)
    fused.saved = [Saved(SavedFrom.INPUT, forward.inputs.index(n)) if n in forward.inputs
                   else Saved(SavedFrom.OUTPUT, forward.outputs.index(n)) for n in saved_names]
    fused.tangents = differentiable
    fused.backward_constants = [ProgramInput.constant(Origin.BACKWARD, n) for n in bgraph.constants]
    fused.constants.update({i.name: t for i, t in zip(fused.backward_constants, bgraph.constants.values())})
    grads, k = [], 0
    for name in bouts:
        grads.append(None if name is None else k)
        k += name is not None
    fused.grads = grads + [None] * forward.num_constants


def _buffer_updates(output_specs) -> list[tuple[str, int]]:
    return [(spec.target, k) for k, spec in enumerate(output_specs) if spec.kind.name == "BUFFER_MUTATION"]


def _user_outputs(output_specs) -> list[int]:
    return [k for k, spec in enumerate(output_specs) if spec.kind.name == "USER_OUTPUT"]


def _add_inference(fused: FusedGraph, program: ExportedProgram, graph: Graph, label: str,
                   write_buffers: bool = False) -> None:
    """The exported graph (read as `graph`, with every input's shape readable) as the inference program: its inputs
    are the exported placeholders in order (as the forward program's), then the constants the reading folded.
    `write_buffers` (nothing differentiates the program): it writes its buffer updates into the buffers
    (buffer_writes.py) and returns the module's outputs alone; otherwise the buffer updates first, as the forward
    program."""
    placeholders = [n.name for n in program.graph.nodes if n.op == "placeholder"]
    specs = program.graph_signature.input_specs
    inputs = list(placeholders)
    kinds = [_program_input(spec) for spec in specs]
    for name, tensor in graph.constants.items():
        if name not in placeholders:  # a factory of fixed size, computed when the graph was read
            inputs.append(name)
            constant = ProgramInput.constant(Origin.INFERENCE, name)
            kinds.append(constant)
            fused.constants[constant.name] = tensor
    output_specs = program.graph_signature.output_specs
    user, buffers = iter(graph.outputs), iter(value for _key, value in graph.buffer_updates)
    outputs = [next(buffers) if spec.kind.name == "BUFFER_MUTATION" else next(user) for spec in output_specs]
    nodes = {n.name: n for n in program.graph.nodes}
    picks = list(range(len(outputs)))  # of the exported graph's outputs, for the compiled program
    writes: list[tuple[str, str]] = []  # (buffer placeholder, value written into it)
    package_writes: list[tuple[int, int]] = []
    fused.inference_buffer_updates, fused.inference_user_outputs = fused.buffer_updates, fused.user_outputs
    if write_buffers and graph.buffer_updates:
        buffer_input = {key: name for name, key in graph.state.items()}
        writes = [(buffer_input[key], value) for key, value in graph.buffer_updates]
        graph = written_in_place(graph, writes, {name: n.meta.get("val") for name, n in nodes.items()})
        outputs, picks = [outputs[k] for k in fused.user_outputs], fused.user_outputs
        package_writes = [(inputs.index(target), k) for (target, _), (_key, k) in zip(writes, fused.buffer_updates)]
        fused.inference_buffer_updates, fused.inference_user_outputs = [], list(range(len(outputs)))
        fused.inference_writes = [key for key, _ in graph.buffer_updates]
    fused.inference = build(f"{label} inference", graph, inputs, outputs, *output_shapes(nodes, outputs, placeholders),
                            writes=writes)
    fused.inference_inputs = kinds
    for spec in specs:  # tensors torch.export lifted out of the module (a scalar written into a slice)
        if spec.kind == InputKind.CONSTANT_TENSOR:
            fused.constants[_program_input(spec).name] = program.constants[spec.target]
    folded = {name: graph.constants[name] for name in inputs[len(placeholders):]}
    fused.sources["inference"] = GraphSource(program.graph_module, len(placeholders), picks,
                                             input_examples(nodes, placeholders, folded),
                                             configs=inference_configs(program.graph_module), writes=package_writes)


_METADATA_CHECKS = {torch.ops.aten._assert_tensor_metadata.default}


def _graph_to_trace(module: torch.fx.GraphModule, checkpointed: bool) -> torch.fx.GraphModule:
    """The exported graph as AOTAutograd traces it, a copy where it differs:
    - its views made reshapes (program.views_as_reshapes): AOTAutograd's tracing then decides view or copy by the
      strides its own kernels give;
    - with checkpointed regions, without torch.export's checks of a tensor's dtype and device (its record of a
      `.to()` call, in transformers' code): torch's partitioner refuses to recompute regions in a graph holding
      such a call (an "impure op"), and they checked the example the graph's own shapes and dtypes fix."""
    traced = views_as_reshapes(module)
    if not (checkpointed and any(n.target in _METADATA_CHECKS for n in traced.graph.nodes)):
        return traced
    if traced is module:  # no view was made a reshape: not copied yet
        traced = copy.deepcopy(module)
    for node in [n for n in traced.graph.nodes if n.target in _METADATA_CHECKS]:
        traced.graph.erase_node(node)
    traced.recompile()
    return traced


def _unaliased(value, inputs):
    """An output that is an input, or a view (of an input, a parameter or another output), copied: AOTAutograd
    would return it outside its graphs by replaying the view, and its backward would then take fewer cotangents;
    the programs return buffers of their own."""
    if isinstance(value, torch.Tensor) and (is_view(value) or any(value is v for v in inputs)):
        return value.clone()
    return value


def _program_input(spec) -> ProgramInput:
    """What an exported graph's placeholder is, from torch.export's input spec."""
    if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
        return ProgramInput.state(spec.target)
    if spec.kind == InputKind.CONSTANT_TENSOR:
        return ProgramInput.constant(Origin.LIFTED, spec.arg.name)
    return ProgramInput.user(spec.arg.name)


def _flat_inputs(program: ExportedProgram, trainable: set[str], input_grads: bool) -> list:
    """Example values for every placeholder of the exported graph: the exported graph's own fake values (no
    memory: AOTAutograd traces without computing, and symbolic sizes stay the same symbols); trainable parameters
    and, with `input_grads`, floating user inputs require gradients (MindSpore may ask for either)."""
    examples = [n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder"]
    flat = []
    with mode_of(examples):
        for spec, example in zip(program.graph_signature.input_specs, examples):
            value = example.detach().clone()
            wants_grad = (spec.target in trainable if spec.kind == InputKind.PARAMETER else
                          input_grads and spec.kind == InputKind.USER_INPUT
                          and (value.is_floating_point() or value.is_complex()))
            flat.append(value.requires_grad_(True) if wants_grad else value)
    return flat


def input_examples(nodes: dict, placeholders: list[str], constants: dict[str, torch.Tensor]) -> list:
    """(shape, dtype) of each program input: the graph's placeholders, then the constants it was given."""
    values = [nodes[name].meta.get("val") for name in placeholders] + list(constants.values())
    return [(tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else ((), None) for v in values]


def output_shapes(nodes: dict, names: list[str], inputs: list[str]) -> tuple[list, list]:
    """Each output's dtype, and its shape as ints and size expressions over the program inputs `inputs`."""
    bindings = bind_symbols([nodes[n].meta.get("val") for n in inputs])
    shapes, dtypes = [], []
    for name in names:
        val = nodes[name].meta.get("val")
        if not isinstance(val, torch.Tensor):
            raise PortError(f"{name} is not a tensor ({type(val).__name__}); fuse=True needs tensors between programs")
        try:
            shapes.append([from_sympy(d.node.expr, bindings) if isinstance(d, torch.SymInt) else int(d)
                           for d in val.shape])
        except ValueError as exc:
            raise PortError(f"{name}: {exc}; fuse=True needs output sizes given by the input shapes") from None
        dtypes.append(val.dtype)
    return shapes, dtypes
