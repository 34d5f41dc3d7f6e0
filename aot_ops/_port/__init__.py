"""aot_ops.from_torch: a torch.nn.Module as a MindSpore Cell, every node one bridged ATen operator.

    cell = aot_ops.from_torch(model, (x,))                     # PyNative and GRAPH_MODE, gradients, training

`port` runs the stages over one plan (plan.py), each in a sub-package named for it:
- trace/: the module exported at the functional level, a structural copy of it, never the user's (export.py);
  a user's torch.autograd.Function kept with its backward as one operator (functions.py); a model's alike layers
  exported as two (layer_stack.py);
- read/: each mode's graph read as aten.op calls, every refusal named by node and source line (graph.py);
  stage.py runs these two stages for each mode;
- programs/ (fuse=True, fuse="compile"): each graph as programs, a whole forward or backward one aot call;
- cells/: the Cell's source (codegen.py, written to the build cache: GRAPH_MODE compiles from source) and the cell
  (cell.py: structure, parameters, buffers, weights both ways, training and evaluation).
lm/ builds the language-model layer (from_torch_lm, generate, from_pretrained) on top of `port`; split.py
(from_torch_split) ports each of Dynamo's graphs with it.
"""
from __future__ import annotations

import inspect
import logging
from typing import Any, Sequence

import torch

from .._core.heap import release_tracing_memory
from . import plan_cache
from .cells import stage as cell_stage
from .cells.cell import PortedCell
from .errors import PortError
from .programs import stage as program_stage
from .read import stage as read_stage
from .trace.export import CACHE_ADVICE, Inputs
from .trace.tensor_subclasses import derivatives_explained, with_plain_weights

__all__ = ["from_torch", "PortError", "PortedCell"]

log = logging.getLogger(__name__)


def from_torch(model: torch.nn.Module, args: Sequence[torch.Tensor] | torch.Tensor = (),
               kwargs: dict[str, Any] | None = None, *, dynamic_batch: bool = False, dynamic_shapes: Any = None,
               fuse: bool | str = False, input_grads: bool = True, jit: bool = True,
               evaluation_only: bool = False, share_weights: bool = False,
               checkpoint: str | None = None) -> PortedCell:
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
    - Activation checkpointing: where the module calls `torch.utils.checkpoint` (transformers'
      `gradient_checkpointing_enable()`, timm's `set_grad_checkpointing()`), the backward computes those regions
      again instead of keeping their activations, as torch's does (fused: in both modes; per node: MindSpore's
      recompute, which it applies in GRAPH_MODE only). `checkpoint="layers"` does so for every numbered layer (each module of
      a ModuleList or Sequential) of a module that does not ask for it: less memory, about one more forward's time
      per step (docs/porting.md).
    Raises PortError naming the torch node and its source line when something cannot be ported.
    """
    for name, value in (("evaluation_only", evaluation_only), ("share_weights", share_weights)):
        if not isinstance(value, bool):
            raise TypeError(f"from_torch: {name}={value!r}; give True or False")
    if checkpoint not in (None, "layers"):
        raise ValueError(f"from_torch: checkpoint={checkpoint!r}; give None (checkpointing as the module asks) or "
                         "'layers' (every numbered layer recomputed in the backward)")
    why = (f"{type(model).__name__} was ported with evaluation_only=True: the cell has no training graph; port it "
           "without evaluation_only to train it") if evaluation_only else None
    return port(model, args, kwargs, dynamic_batch=dynamic_batch, dynamic_shapes=dynamic_shapes, fuse=fuse,
                input_grads=input_grads, jit=jit, no_training=why, share_weights=share_weights,
                checkpoint_layers=checkpoint == "layers")


def port(model: torch.nn.Module, args: Sequence[torch.Tensor] | torch.Tensor = (),
         kwargs: dict[str, Any] | None = None, *, dynamic_batch: bool = False, dynamic_shapes: Any = None,
         fuse: bool | str = False, input_grads: bool = True, jit: bool = True,
         no_training: str | None = None, compile_inputs: dict[str, tuple[int | None, ...]] | None = None,
         share_weights: bool = False, plan_key: str | None = None, export_two_layers: bool = False,
         checkpoint_layers: bool = False) -> PortedCell:
    """from_torch, and for ports made for one use (from_torch_lm: generation): `no_training`, why the cell has
    no training graph (the training graph is then neither traced nor checked, and no gradient is prepared: an
    inference-only cell); `compile_inputs`, with
    fuse="compile" and dynamic sizes, the input shapes the programs are compiled for (input name -> shape; a None
    size is compiled as dynamic, over its whole range; other sizes run interpreted); `plan_key`, a key that determines the port's plan (from_pretrained's, plan_cache.py):
    the plan kept under it is used instead of exporting and fusing, or made and kept; `export_two_layers`, the
    evaluation graph exported with two of the module's alike layers and the others copied into it (the layer stack
    stage, layer_stack.py: a model from_pretrained built, whose layers are transformers' own);
    `checkpoint_layers`: from_torch's checkpoint="layers"."""
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
    quantized_model, model = model, with_plain_weights(model)  # quantized weights as their inner tensors
    trainable = {key for key, p in model.named_parameters(remove_duplicate=False) if p.requires_grad}

    # (compiled programs are not kept; nor plans with the port's own checkpointing, which the key does not cover)
    kept_as = plan_key if fuse != "compile" and not checkpoint_layers else None
    plan = plan_cache.read(kept_as) if kept_as else None
    if plan is None:
        # The stages, each taking the plan the one before made
        with derivatives_explained(quantized_model):
            plan = read_stage.traced_and_read(model, inputs, dynamic_shapes, no_training, fuse, trainable,
                                              input_grads, export_two_layers, checkpoint_layers)
            if fuse:
                plan = program_stage.fused(plan, model, trainable, input_grads, compile_programs=fuse == "compile",
                                           compile_inputs=compile_inputs)
        if kept_as:
            plan_cache.write(kept_as, plan)
        release_tracing_memory()
    if not fuse and jit and plan.half_gradients_fanned_out:
        # MindSpore's autodiff of a PyNative ms.jit call sums a bfloat16 value's gradients itself (AddN, no
        # bfloat16 CPU kernel), which the per-node graph avoids (fan_out.py): such a cell runs operator by operator.
        log.warning("from_torch(%s): jit=True cannot apply: the port sums bfloat16 gradients per node, which "
                    "MindSpore's autodiff of one PyNative graph cannot; the cell runs operator by operator in "
                    "PyNative (cell.jit is False)", type(model).__name__)
        jit = False
    return cell_stage.cell(model, plan, input_grads, fuse, jit, share_weights)


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
