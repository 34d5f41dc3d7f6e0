"""PortedCell: what every ported network has, besides its generated graph (codegen.py).

The cell keeps the torch module's structure (module_tree.py: nested Cells, so parameters are named as in the
state_dict and print(cell) shows the module tree), its weights as MindSpore Parameters (trainable as in torch;
buffers as non-trainable Parameters, which the training graph updates with Assign), both ways with
load_torch_state_dict and torch_state_dict, and the call: keyword binding and checks (call_inputs.py), one compiled
graph per call in PyNative (graph_entry.py), set_train(True/False) switching between the module's training and
evaluation graphs. With fuse=True each mode's programs and their operators belong to a ModePrograms
(mode_programs.py).
"""
from __future__ import annotations

import collections
import sys
from dataclasses import dataclass, field
from typing import Mapping

import mindspore as ms
import torch
from mindspore import nn, ops

from ..._core import dtypes as _dtypes
from ..._core.convert import to_ms
from ..._core.mindspore_private import has_hooks, recompile_on_next_call, recording_gradients, run_compiled_graph
from ..._core.primitive import CALL_LOCK, AotOp
from ..._core.torch_private import tree_unflatten
from ...errors import named_kernel_failure
from ..errors import PortError
from ..modes import Mode, constant_attribute, flat_twin_class, operators_attribute
from ..programs.mode_programs import ModePrograms
from ..programs.saved_in_library import worth_keeping
from .call_inputs import bind_inputs, check_inputs
from .graph_entry import COLLECTED_GRAPHS, PyNativeGraph, sync_phase
from .module_tree import OperatorSet, build_module_cells, describe_counts
from .weights import IncompatibleKeys, load_torch_state_dict, make_parameters, torch_state_dict


@dataclass
class StateEntry:
    """One parameter or buffer of the ported module. Its value is not kept here: the cell's Parameter holds it, and
    nothing a port keeps holds the torch module's tensors (deleting the module frees them)."""

    key: str                      # the state_dict key ("encoder.linear1.weight")
    trainable: bool               # a parameter with requires_grad (buffers never are)
    persistent: bool = True       # in the module's state_dict (non-persistent buffers are not)
    alias_of: str | None = None   # a tied weight: the key of the entry holding the same tensor


@dataclass
class PortSpec:
    """What a ported cell is made from (everything but the generated graph)."""

    module_name: str
    modules: list[tuple[str, str]]             # (path, class name) of every submodule, parents first
    state: list[StateEntry]
    constants: dict[str, torch.Tensor]         # by the attribute the cell holds each in (modes.constant_attribute)
    inputs: list                               # graph.UserInput of the user inputs
    out_spec: object                           # the outputs' structure (a torch pytree spec)
    training: bool                             # the module's mode when it was ported
    no_training: str | None = None             # why the cell cannot train (dropout with p > 0), or None
    operator_counts: dict[str, dict[str, int]] = field(default_factory=dict)  # mode -> module path -> count
    fused: dict = field(default_factory=dict)  # mode -> fused.FusedGraph (fuse=True)
    # fuse=True with collectives: (mode, piece name) -> the piece's fused.FusedGraph (programs/pieces.py)
    pieces: dict = field(default_factory=dict)
    compile_on_first_use: bool = False          # fuse="compile": each mode's programs compiled when it first runs
    jit: bool = True                           # PyNative calls run the cell as one ms.jit graph (graph_entry.py)
    functions: tuple = ()                      # functions.FunctionOperator the graphs call: they live as the cell
    # a model split over the job's ranks (tensor_parallel.py): state_dict key -> (dimension, this rank's start and
    # stop, whole size) of each split tensor, which torch_state_dict gathers
    split: dict = field(default_factory=dict)
    # a model sharded over the job's ranks (sharded.py): state_dict key -> sharded.FlatLayout of each flat shard,
    # which torch_state_dict gathers into its parameters' own keys
    flat_shards: dict = field(default_factory=dict)


class StateWrite(nn.Cell):
    """`self.assign(parameter, value)` of the generated code: a buffer update (BatchNorm's running statistics, a
    key/value cache). MindSpore's CPU Assign has no bfloat16 kernel; the in-place copy does (the branch is decided
    when the graph is compiled)."""

    def construct(self, parameter, value):
        if parameter.dtype == ms.bfloat16:
            return parameter.copy_(value)
        return ops.assign(parameter, value)


class PortedCell(nn.Cell):
    """Base of every cell aot_ops.from_torch generates."""

    module_name = "Module"

    def __init__(self, spec: PortSpec, initial_state: Mapping[str, torch.Tensor], share_weights: bool = False):
        """`initial_state`: the module's tensors by state key, copied into the cell's Parameters (not kept).
        `share_weights`: each of those tensors then becomes a view of its Parameter's memory (its own memory is
        freed as soon as its Parameter exists, so the weights are held once, even while the cell is built)."""
        super().__init__()
        self._spec = spec
        self._cells_by_path = build_module_cells(self, spec)
        self._parameters = make_parameters(self._cells_by_path, spec.state, initial_state, share_weights)
        for attribute, tensor in spec.constants.items():
            setattr(self, attribute, to_ms(tensor))
        self.assign = StateWrite()
        # Not cells: held in __dict__, out of MindSpore's attribute machinery.
        self.__dict__["_mode_programs"] = {Mode(mode): ModePrograms(fused, spec.compile_on_first_use)
                                           for mode, fused in spec.fused.items()}
        self.__dict__["_piece_programs"] = {key: ModePrograms(fused, spec.compile_on_first_use)
                                            for key, fused in spec.pieces.items()}
        self.__dict__["_may_keep_saved"] = False  # during a PyNative training call (see saved_in_library)
        self.__dict__["_can_keep_saved"] = any(Mode(m) is not Mode.EVAL and worth_keeping(f)
                                               for m, f in spec.fused.items())
        self._compile_programs(spec.training)
        for mode, operators in self.make_operators().items():
            setattr(self, operators_attribute(mode), operators)
        super().set_train(spec.training)
        flat = getattr(sys.modules[type(self).__module__], flat_twin_class(type(self).__name__), None)
        # Not a child cell (a child would show in print(cell) and be a second owner of the parameters).
        self.__dict__["_flat_twin"] = flat(self) if flat is not None else None
        self.jit = spec.jit
        if any(d is None for i in spec.inputs for d in i.shape):
            # One compiled GRAPH_MODE graph for every batch size (the flat twin is what GRAPH_MODE compiles for
            # dict outputs); PyNative runs any shape anyway.
            dynamic = [ms.Tensor(shape=list(i.shape), dtype=_dtypes.to_ms(i.dtype)) for i in spec.inputs]
            self.set_inputs(*dynamic)
            if self._flat_twin is not None:
                self._flat_twin.set_inputs(*dynamic)

    def __call__(self, *args, **kwargs):
        if self._compile_programs(self.training):
            self._rebuild_operators()  # switched mode through a parent's set_train
        args = bind_inputs(self.module_name, self._spec.inputs, args, kwargs)
        check_inputs(self.module_name, self._spec.inputs, args)
        graph_mode = ms.get_context("mode") == ms.GRAPH_MODE
        keep_saved = not graph_mode and self._may_differentiate()
        # a sharded port's PyNative training step runs operator by operator: an ms.jit graph's forward would keep
        # every layer's gathered weights for its backward graph (distributed.GatheredPiece)
        sharded_step = not graph_mode and bool(self._spec.flat_shards) and self._training_under_gradient()
        as_graph = graph_mode or (self._runs_as_graph() and not keep_saved and not sharded_step)
        spec = self._spec.out_spec
        flat_twin = self.__dict__.get("_flat_twin")
        with COLLECTED_GRAPHS.call(), CALL_LOCK:  # one thread at a time (see _core/primitive.py: CALL_LOCK)
            try:
                self.__dict__["_may_keep_saved"] = keep_saved
                if not graph_mode and as_graph:
                    result = self._pynative_graph()(args)
                    if flat_twin is not None:
                        return tree_unflatten(list(result), spec)
                elif graph_mode:
                    target = flat_twin or self
                    sync_phase(target, self.training)
                    result = run_compiled_graph(target, args)  # after the first call: the graph, directly
                    if result is None:
                        result = target(*args) if flat_twin is not None else super().__call__(*args)
                    if flat_twin is not None:
                        return tree_unflatten(list(result), spec)
                else:
                    result = super().__call__(*args)
            except Exception as exc:
                if as_graph:
                    self._forget_compiled_graphs()
                named = named_kernel_failure(exc, f"{self.module_name} (ported)")
                if named is not None:
                    raise named from exc
                raise
            finally:
                self.__dict__["_may_keep_saved"] = False
        # construct returns dicts for dict-like outputs (a ModelOutput cannot be built inside a graph)
        return tree_unflatten(_leaves(result, spec), spec) if _has_custom_containers(spec) else result

    @property
    def saved_in_library(self) -> bool:
        """Whether the forward program keeps its saved tensors in the library (programs/saved_in_library.py): in a
        PyNative training call recording a gradient, whose backward is sure to follow. Read by the generated
        forward where construct runs: MindSpore records the gradient of a cell differentiated itself only once
        Cell.__call__ has begun."""
        return self.__dict__["_may_keep_saved"] and recording_gradients()

    def _may_differentiate(self) -> bool:
        """A PyNative training call whose gradient MindSpore may record, of a cell whose programs keep their saved
        tensors in the library (programs/saved_in_library.py: big enough to matter): it runs construct operator by
        operator (one program call, its buffer updates), not as an ms.jit graph, whose forward and backward graphs
        each keep their memory from call to call (docs/performance.md, training memory)."""
        return self.__dict__["_can_keep_saved"] and self._training_under_gradient()

    def _training_under_gradient(self) -> bool:
        """A training call whose gradient MindSpore may record (the cell differentiated itself, or inside a
        gradient)."""
        return self.training and (self.requires_grad or recording_gradients())

    @property
    def input_names(self) -> tuple[str, ...]:
        """The cell's inputs in call order, named as the torch module's forward names them (tensors given
        positionally, then the tensor keyword arguments of the port)."""
        return tuple(spec.name for spec in self._spec.inputs)

    @property
    def modes(self) -> tuple[str, ...]:
        """The graphs the port made, by mode name: ("both",) when one graph serves training and evaluation,
        ("train", "eval") when they differ, ("eval",) for a cell that only evaluates."""
        return tuple(Mode(mode).value for mode in self._spec.operator_counts)

    @property
    def jit(self) -> bool:
        """Whether a call in PyNative mode runs the cell as one compiled MindSpore graph (the default; set by
        from_torch(jit=...)). False runs it operator by operator through PyNative, as MindSpore runs a Cell."""
        return self.__dict__["_jit"]

    @jit.setter
    def jit(self, value: bool) -> None:
        if not isinstance(value, bool):
            raise TypeError(f"{self.module_name}: jit must be True or False, got {value!r}")
        self.__dict__["_jit"] = value

    def _runs_as_graph(self) -> bool:
        """PyNative: one graph unless jit is off or hooks are registered (MindSpore runs a cell's hooks around its
        construct in Cell.__call__, which a graph call bypasses)."""
        return self.__dict__["_jit"] and not has_hooks(self)

    def _pynative_graph(self) -> PyNativeGraph:
        graph = self.__dict__.get("_pynative_graph_entry")
        if graph is None:
            graph = PyNativeGraph(self, self.__dict__.get("_flat_twin") or self)
            self.__dict__["_pynative_graph_entry"] = graph
        return graph

    def _forget_compiled_graphs(self) -> None:
        """After a kernel failed, MindSpore 2.10 fails every later run of that compiled graph with an empty
        RuntimeError (built-in operators too); a new creation time gives the next call a freshly compiled graph."""
        for cell in (self, self.__dict__.get("_flat_twin")):
            if cell is not None:
                recompile_on_next_call(cell)

    # ---- structure ---------------------------------------------------------------------------------------------

    def make_operators(self) -> dict[str, OperatorSet]:
        raise NotImplementedError  # generated

    @property
    def mode_programs(self) -> dict[str, ModePrograms]:
        """With fuse=True: each mode's programs (the ones it runs now, compiled or interpreted) by the mode's name
        ("train", "eval", or "both" when one graph serves both), for tools and tests; empty for a port per node."""
        return {mode.value: programs for mode, programs in self.__dict__["_mode_programs"].items()}

    def make_program(self, mode: str, bprop_factory) -> AotOp:
        """The forward program of `mode` (fuse=True) as one operator, its bprop calling the backward program."""
        return self.__dict__["_mode_programs"][Mode(mode)].forward_operator(bprop_factory, self._constant_of(mode))

    def make_program_keeping(self, mode: str, bprop_factory) -> AotOp:
        """The forward program of `mode` keeping its saved tensors in the library, for a PyNative call recording a
        gradient (programs/saved_in_library.py); its bprop calls the backward program taking them."""
        return self.__dict__["_mode_programs"][Mode(mode)].keeping_operator(bprop_factory, self._constant_of(mode))

    def make_inference(self, mode: str, bprop_factory) -> AotOp:
        """The inference program of `mode` (fuse=True: the module's outputs, nothing saved) as one operator; its
        bprop runs the forward program again, then the backward program."""
        return self.__dict__["_mode_programs"][Mode(mode)].inference_operator(bprop_factory, self._constant_of(mode))

    def make_piece(self, mode: str, piece: str, bprop_factory) -> AotOp:
        """A piece's forward program (fuse=True with collectives: programs/pieces.py) as one operator, its bprop
        calling the piece's backward program."""
        return self.__dict__["_piece_programs"][(Mode(mode), piece)].forward_operator(
            bprop_factory, self._constant_of(mode, f"{piece}_"))

    def make_gathered_piece(self, mode: str, piece: str, bprop_factory, cls, gathers: dict):
        """A piece of a sharded port with the gathers of the layer weights it alone takes (distributed.GatheredPiece):
        `cls` the generated subclass, `gathers` its UnshardCells by input position."""
        programs = self.__dict__["_piece_programs"][(Mode(mode), piece)]
        constant = self._constant_of(mode, f"{piece}_")
        return cls(programs.forward_operator(bprop_factory, constant),
                   programs.backward_function(bprop_factory, constant), gathers)

    def make_piece_inference(self, mode: str, piece: str, bprop_factory) -> AotOp:
        """A piece's inference program as one operator; its bprop (a gradient asked in evaluation) runs the piece's
        forward program again, then its backward program."""
        return self.__dict__["_piece_programs"][(Mode(mode), piece)].inference_operator(
            bprop_factory, self._constant_of(mode, f"{piece}_"))

    def _constant_of(self, mode: str, prefix: str = ""):
        """The cell's value of a constant input of `mode`'s programs (the attribute the generated source reads)."""
        return lambda program_input: getattr(self, constant_attribute(mode, prefix + program_input.name))

    def extend_repr(self):
        return f"{self.module_name}{describe_counts(self._spec.operator_counts, '')}"

    # ---- training and evaluation -------------------------------------------------------------------------------

    def set_train(self, mode: bool = True):
        if mode and self._spec.no_training:
            raise PortError(self._spec.no_training)
        if self._compile_programs(mode):
            self._rebuild_operators()
        return super().set_train(mode)

    # ---- fuse="compile" ----------------------------------------------------------------------------------------

    def _compile_programs(self, training: bool) -> bool:
        """fuse="compile": compiles what the cell runs in that mode, once (ModePrograms.compile_for). True if a
        program changed (the operators must then be rebuilt)."""
        programs = self.__dict__["_mode_programs"]
        mode = Mode.running(training, programs)
        replaced = mode in programs and programs[mode].compile_for(training)
        pieces = self.__dict__["_piece_programs"]  # a graph with collectives: each piece's programs
        mode = Mode.running(training, {m for m, _ in pieces})
        compiled = [p.compile_for(training) for (m, _), p in pieces.items() if m is mode]  # every one, not any()
        return replaced or any(compiled)

    def _rebuild_operators(self) -> None:
        for mode, operators in self.make_operators().items():
            setattr(self, operators_attribute(mode), operators)
        self._forget_compiled_graphs()  # GRAPH_MODE compiles the graphs again, with the new operators

    # ---- weights both ways -------------------------------------------------------------------------------------

    def torch_state_dict(self, gather: bool = True) -> "collections.OrderedDict[str, torch.Tensor]":
        """The module's state_dict (same keys, torch tensors) with this cell's current values: load it into the
        torch module with module.load_state_dict. A model split over the job's ranks (aot_ops.tensor_parallel):
        every split tensor gathered whole from the ranks, the whole model's state_dict, which every rank must ask
        for (a collective); a sharded model (aot_ops.shard): every flat shard gathered and cut back into its
        parameters, under their own keys and in their own dtype. `gather=False`: this rank's shards, as the cell
        holds them (a per-rank checkpoint, which load_torch_state_dict takes back)."""
        state = torch_state_dict(self._parameters, self._spec.state)
        if gather and self._spec.split:
            from ..distributed import gathered_whole

            state = gathered_whole(state, self._spec.split)
        if gather and self._spec.flat_shards:
            from ..distributed import gathered_flat_shards

            state = gathered_flat_shards(state, self._spec.flat_shards)
        return state

    def load_torch_state_dict(self, state_dict: Mapping[str, torch.Tensor], strict: bool = True) -> IncompatibleKeys:
        """Copies a torch state_dict (of the ported module, e.g. a checkpoint) into this cell's Parameters.
        Shapes and dtypes must match; with strict=True (as torch) every key must be present and known."""
        return load_torch_state_dict(self.module_name, self._parameters, self._spec.state, state_dict, strict)


def _has_custom_containers(spec) -> bool:
    """Whether the output structure holds containers other than tuple, list and dict (a ModelOutput)."""
    if spec.is_leaf():
        return False
    return spec.type not in (tuple, list, dict) or any(_has_custom_containers(c) for c in spec.children())


def _leaves(value, spec) -> list:
    """The leaves of an output as construct returns it (dict-like outputs as dicts), in the pytree spec's order."""
    if spec.is_leaf():
        return [value]
    if isinstance(spec.type, type) and issubclass(spec.type, dict):
        parts = [value[key] for key in spec.context]
    else:
        parts = list(value)
    return [leaf for part, child in zip(parts, spec.children()) for leaf in _leaves(part, child)]
