"""torch.export at the level the bridge runs: functional ATen operators, whole (not the core decomposition).

- `torch.export.export` gives the training-level graph (in-place ops, batch norm updating buffers silently);
  `run_decompositions({})` makes it functional while keeping whole operators (linear, layer_norm, conv2d), which
  the bridge runs one aot call each. The default decomposition table would split them into several times more
  calls.
- Then only what the bridge refuses is decomposed, with torch's own decompositions, until nothing refused is left
  that torch can decompose: scaled_dot_product_attention (tagged random because of its dropout_p, even at 0) turns
  into matmuls and a softmax this way.
- Dropout that draws nothing (p == 0, or eval mode) is kept here and becomes the identity when the graph is read.
- What runs under torch.no_grad() (spectral norm's power iteration, a detached statistic) is marked by
  torch.export as a set_grad_enabled(False) region, which run_decompositions inlines into ordinary nodes; its
  results are detached first, so that no gradient flows through them (MindSpore would differentiate them).
- A torch.autograd.Function of the user's is recorded as one operator standing for its application, whose
  gradient is the Function's own backward (functions.py): torch.export alone would record what its forward
  computes, and MindSpore would differentiate that instead, silently (a straight-through round would get zero
  gradients). A graph that is never differentiated (inference only) keeps the forward's operators.
- A `torch.utils.checkpoint` region's nodes are marked as such (checkpoints.py): the backward recomputes them.
- Operators a library registers with torch.library (not ATen) stay whole: the bridge calls them through torch's
  dispatcher, their gradient through their registered autograd.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import operator
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram

from ..._aten import schema, sizes
from ..._aten.encode import encode
from ..._core import native_state as _runtime
from ..._core.primitive import CALL_LOCK
from ..._core.torch_private import HigherOrderOperator, OpOverload, schema_of
from ..errors import SPLIT_ADVICE, PortError, raised_by_aot_ops
from .checkpoints import checkpoints_marked, has_checkpoints
from .fake import mode_of
from .functionalize import functionalize, retarget_devices
from .functions import FunctionOperator, recorded_as_operators
from .grouped_attention import attend_per_key_value_head
from .int8_products import int8_weight_products
from .module_copy import structural_copy

log = logging.getLogger(__name__)

DROPOUTS = {torch.ops.aten.native_dropout.default, torch.ops.aten.dropout.default}


def dropout_is_identity(node: torch.fx.Node) -> bool:
    """A dropout call that draws no random numbers: probability 0, or not in training mode."""
    args = list(node.args) + [node.kwargs.get(k) for k in ("p", "train") if k in node.kwargs]
    p, train = args[1], args[2]
    return (isinstance(p, (int, float)) and p == 0) or train is False


def is_size(node: torch.fx.Node) -> bool:
    """The node computes a size (sym_size, s0 * 16), not a tensor: the graph reader uses its expression."""
    value = node.meta.get("val")
    return isinstance(value, (torch.SymInt, int)) and not isinstance(value, bool)


def refusal(node: torch.fx.Node) -> str | None:
    """Why the bridge cannot run this node's operator as it is (None: it can)."""
    target = node.target
    if not isinstance(target, OpOverload):
        return None
    if is_size(node):
        return None  # never an operator call
    if target in DROPOUTS:
        return None if dropout_is_identity(node) else "it draws random numbers (dropout with p > 0 in training)"
    try:
        call = _example_call(node)
        attrs, tensors, _key = encode(call)
    except TypeError:  # arguments aot_ops cannot encode: the graph reader names them; the operator is judged here
        schema_name = schema_of(target)
        return _runtime.aten_refusal(f"{schema_name.name}.{schema_name.overload_name}".rstrip("."), True) or None
    try:
        schema.check_in_scope(call, attrs, tensors, factories=True)
    except ValueError as exc:
        return str(exc).split(": ", 1)[-1]
    return None


def _example_call(node: torch.fx.Node) -> schema.BoundCall:
    """The node's call bound to its schema with its example values: tensors as their fake values (their dtypes
    decide some refusals: a boolean index), sizes that depend on the input shapes as a size expression."""
    def example(value):
        if isinstance(value, (list, tuple)):
            return [example(v) for v in value]
        if isinstance(value, torch.fx.Node):
            value = value.meta.get("val")
        if isinstance(value, torch.SymInt):
            return sizes.size(0, 0)  # any size: no refusal depends on one
        return value

    overload = node.target
    positional = [a for a in schema_of(overload).arguments if not a.kwarg_only]
    given = {a.name: v for a, v in zip(positional, node.args)}
    given.update(node.kwargs)
    return schema.bind(overload, (), {name: example(v) for name, v in given.items()})


@dataclass
class Inputs:
    """A module's example call: tensors given positionally and by keyword (the cell's inputs), and the keyword
    values fixed into the port (not tensors: torch.export would specialise them anyway)."""

    args: tuple
    tensor_kwargs: dict[str, torch.Tensor] = field(default_factory=dict)
    fixed_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Exported:
    """An export: the graph, and the operators standing for the user's Functions it calls (functions.py), which
    exist while the port holds them."""

    program: ExportedProgram
    functions: tuple[FunctionOperator, ...] = ()


def export(model: torch.nn.Module, inputs: Inputs, dynamic_shapes: Any, training: bool,
           backward: bool = True, rewrite_in_place: bool = False) -> Exported:
    """The module's graph in the given mode, functional, with what the bridge refuses decomposed. `backward=False`:
    the graph will never be differentiated (a user's autograd.Function keeps its forward's operators).
    `rewrite_in_place`: the training-level graph is made functional by rewriting its in-place calls
    (functionalize.py) where that is exact, instead of by torch's functionalisation, which retraces the whole module
    (two thirds of a big model's port); the in-place calls' functional twins have the same derivatives.
    What is traced is a structural copy of the module (module_copy.py), put in the mode and given the fixed keyword
    values there: the user's module is never changed, not even while torch.export swaps its tensors for fakes."""
    traced = structural_copy(model)
    traced.train(training)
    if inputs.fixed_kwargs:
        # forward with the fixed keyword values bound: the graph then takes the tensors only (torch.export would
        # make each value a placeholder of the graph holding a constant). The instance attribute shadows the
        # class's forward, which nn.Module.__call__ looks up.
        traced.forward = functools.partial(traced.forward, **inputs.fixed_kwargs)
    # No call of aot_ops runs in another thread meanwhile: torch.export marks the whole process as exporting
    # (torch.compiler.is_exporting() is not per thread), and torch code another thread runs then edits the same
    # module-global node meta (torch.fx.traceback) as the export: a ported cell's inference in fake mode raced
    # it (KeyError 'custom', 1 run in 12 of tests/test_threads.py's ports beside calls).
    with CALL_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.export's own deprecations, not the user's
        recording = recorded_as_operators() if backward else contextlib.nullcontext(())
        with _explained("torch.export could not trace the module"), recording as functions, \
                checkpoints_marked() as checkpoints:
            program = torch.export.export(traced, inputs.args, inputs.tensor_kwargs or None,
                                          dynamic_shapes=dynamic_shapes)
        if rewrite_in_place and _without_regions(program) and not _hidden_writes(program) \
                and functionalize(program):
            retarget_devices(program)
        else:
            _detach_no_grad_results(program)
            with _explained("torch.export could not make the graph functional"):
                program = program.run_decompositions({})
        if backward:
            _differentiable_copies(program)
        else:
            attend_per_key_value_head(program)
            int8_weight_products(program)
        program = _decompose_refused(program)
        if checkpoints.regions and not has_checkpoints(program.graph):
            # torch's inlining of a region (autocast around the checkpointed layers) drops the nodes' meta
            log.warning("from_torch(%s): the module's activation checkpointing is lost in the export (its %d "
                        "checkpointed calls run inside a torch.autocast or no_grad region, which torch.export "
                        "inlines without the marks): the port keeps every activation, as without checkpointing; "
                        "call torch.autocast inside the checkpointed layers, or port with checkpoint='layers'",
                        type(model).__name__, checkpoints.regions)
        return Exported(program, tuple(functions))


def _without_regions(program: ExportedProgram) -> bool:
    """No node opens a region (no_grad, autocast, control flow): in-place calls are then all that keeps the
    training-level graph from being the functional one."""
    return not any(node.op == "call_function" and isinstance(node.target, HigherOrderOperator)
                   for node in program.graph.nodes)


def _hidden_writes(program: ExportedProgram) -> bool:
    """A call updates running statistics its schema does not mark as written: the training-level graph keeps
    composite calls whole (aten.batch_norm, aten.instance_norm), which write them in training (`training` or
    `use_input_stats` true; also native_batch_norm, whose schema marks nothing). The rewrite would miss the write:
    such a graph goes through torch's functionalisation."""
    for node in program.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, OpOverload):
            continue
        arguments = schema_of(node.target).arguments
        names = [a.name for a in arguments]
        if "running_mean" not in names:
            continue
        given = dict(zip(names, node.args)) | dict(node.kwargs)
        switch = given.get("training", given.get("use_input_stats", True))
        if given.get("running_mean") is not None and switch is not False:
            return True
    return False


def _detach_no_grad_results(program: ExportedProgram) -> None:
    """Every tensor result of a region that runs with gradients disabled goes through aten.detach: once the region
    is inlined, nothing else would tell that no gradient flows back through it."""
    graph = program.graph_module.graph
    changed = False
    for region in list(graph.nodes):
        if region.target is not torch.ops.higher_order.wrap_with_set_grad_enabled or region.args[0] is not False:
            continue
        for item in list(region.users):
            if item.target is not operator.getitem or not isinstance(item.meta.get("val"), torch.Tensor):
                continue
            with graph.inserting_after(item):
                detached = graph.call_function(torch.ops.aten.detach.default, (item,))
            detached.meta = dict(item.meta)
            item.replace_all_uses_with(detached, delete_user_cb=lambda user: user is not detached)
            changed = True
    if changed:
        program.graph_module.recompile()


def _differentiable_copies(program: ExportedProgram) -> None:
    """aten.copy (functionalisation's form of `x[...] = y` and `x.copy_(y)`) has no derivative in torch, so its
    bridged backward would fail. Each is rewritten as what it computes: the source cast to the destination's dtype,
    broadcast to its shape (expand_as) and cloned (a tensor of its own); the destination then gets no gradient, as
    in torch."""
    graph = program.graph_module.graph
    copies = [n for n in graph.nodes if n.target is torch.ops.aten.copy.default]
    for node in copies:
        dest, src = node.args[0], node.args[1]
        dest_val, src_val = dest.meta["val"], src.meta["val"]
        with graph.inserting_before(node), mode_of([dest_val, src_val]):
            value = src
            if src_val.dtype != dest_val.dtype:
                value = graph.call_function(torch.ops.aten._to_copy.default, (src,), {"dtype": dest_val.dtype})
                value.meta = dict(node.meta, val=src_val.to(dest_val.dtype))
            expanded = graph.call_function(torch.ops.aten.expand_as.default, (value, dest))
            expanded.meta = dict(node.meta, val=value.meta["val"].expand_as(dest_val))
            copied = graph.call_function(torch.ops.aten.clone.default, (expanded,))
            copied.meta = dict(node.meta, val=expanded.meta["val"].clone())
        node.replace_all_uses_with(copied)
        graph.erase_node(node)
    if copies:
        program.graph_module.recompile()


def _decompose_refused(program: ExportedProgram) -> ExportedProgram:
    """Decomposes, with torch's own decompositions, what the bridge refuses, until nothing refused is left that torch
    can decompose. A call refused for drawing random numbers stays whole: its decomposition draws them too (the
    graph reader then refuses the call itself, with what to do)."""
    table = torch.export.default_decompositions()
    tried: set = set()
    while True:
        refused = {n.target for n in program.graph.nodes if n.op == "call_function"
                   and (why := refusal(n)) is not None and "random" not in why}
        decomposable = {op for op in refused - tried if op in table}
        if not decomposable:
            return program
        tried |= decomposable
        with _explained("torch could not decompose " + ", ".join(sorted(str(op) for op in decomposable))):
            program = program.run_decompositions({op: table[op] for op in decomposable})


# Hugging Face's key/value caches (DynamicCache, ...) are Python objects, not tensors torch.export can carry
# (transformers registers no pytree for them): a model run with use_cache=True cannot be exported.
CACHE_ADVICE = ("the key/value cache of use_cache=True (a transformers Cache object) is not a tensor torch.export "
                "carries. To decode with a cache, port the model with aot_ops.from_torch_lm(model, batch_size=..., "
                "max_length=...) (a static cache held by the cell) and call aot_ops.generate; or port with "
                "kwargs={'use_cache': False} (the logits are the same)")


@contextlib.contextmanager
def _explained(what: str):
    """torch.export's own errors (data-dependent control flow, unsupported Python) with what was being done."""
    try:
        yield
    except PortError:
        raise
    except Exception as exc:  # torch's many export exception types; its text says what and where
        if raised_by_aot_ops(exc):
            raise  # a bug or a check of ours: with its own type and traceback, not labelled torch's
        text = str(exc).strip()
        if "transformers.cache_utils" in text:
            raise PortError(f"{what}: {CACHE_ADVICE}") from exc
        if "data-dependent" in text.lower() or "DataDependent" in type(exc).__name__:

            raise PortError(f"{what}: {type(exc).__name__}: {text}{SPLIT_ADVICE}") from exc
        if type(exc).__name__ == "UnsupportedOperatorException":  # an operator with no fake kernel
            raise PortError(f"{what}: {text.splitlines()[0]} has no fake (meta) implementation, which torch.export "
                            "needs to trace it: register one with torch.library.register_fake") from exc
        raise PortError(f"{what}: {type(exc).__name__}: {text}") from exc
