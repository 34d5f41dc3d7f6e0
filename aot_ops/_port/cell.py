"""PortedCell: what every ported network has, besides its generated graph (codegen.py).

- The torch module's structure as nested Cells, so parameters are named as in the state_dict ("layer1.0.conv1.weight";
  under a parent Cell MindSpore prefixes them, as torch does) and print(cell) shows the module tree with the number
  of bridged operators each module makes. Numbered children (Sequential, ModuleList) become a CellList.
- Parameters as mindspore.Parameter (trainable as in torch), buffers as non-trainable Parameters, which the
  training graph updates with Assign (BatchNorm's running statistics and num_batches_tracked).
- Weights both ways: load_torch_state_dict(state_dict) and torch_state_dict().
- set_train(True/False) switches between the module's training and evaluation graphs.
"""
from __future__ import annotations

import collections
import keyword
import sys
import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, NamedTuple

import mindspore as ms
import torch
from mindspore import nn, ops
from torch.utils._pytree import tree_unflatten

from .._core import dtypes as _dtypes
from .._core.convert import ms_view, to_ms, to_torch, torch_view
from .._core.mindspore_private import has_hooks, recompile_on_next_call
from .._build.bundled import library_path
from .._core.opdef import FRESH, OpDef
from .._core.inference import CppInference
from .._core.primitive import CALL_LOCK, AotOp
from ..errors import named_kernel_failure
from .codegen import expected_dtype, expected_shape
from .errors import PortError
from .graph_entry import PyNativeGraph, sync_phase
from .modes import Mode


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
    constants: dict[str, torch.Tensor]
    inputs: list                               # graph.UserInput of the user inputs
    out_spec: object                           # the outputs' structure (a torch pytree spec)
    training: bool                             # the module's mode when it was ported
    refused_training: str | None = None        # why the training graph cannot run (dropout with p > 0)
    operator_counts: dict[str, dict[str, int]] = field(default_factory=dict)  # mode -> module path -> count
    fused: dict = field(default_factory=dict)  # mode -> fused.FusedGraph (fuse=True)
    compile_programs: bool = False             # fuse="compile": compile the programs a mode runs, on first use
    jit: bool = True                           # PyNative calls run the cell as one ms.jit graph (pynative_graph.py)


class IncompatibleKeys(NamedTuple):
    """Like torch's load_state_dict result."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class _Structural:
    """A Cell that only holds Parameters and other cells (the module tree, the operators of a graph): it never runs
    as a graph of its own. MindSpore sets `compile_phase` on every cell of a network at every GRAPH_MODE call, each
    through Cell.__setattr__'s checks (a ported BERT's 78 cells cost about as much as its forward program); these
    keep the value without passing it on."""

    @property
    def compile_phase(self):
        return self.__dict__.get("_compile_phase")

    @compile_phase.setter
    def compile_phase(self, value):
        self.__dict__["_compile_phase"] = value


class _TorchModule(_Structural):
    """What a Cell standing for a torch submodule shows in print(cell): its class and its bridged operators."""

    def __init__(self, kind: str, counts: str):
        super().__init__()
        self._kind, self._counts = kind, counts

    def extend_repr(self):
        return f"{self._kind}{self._counts}"


class ModuleCell(_TorchModule, nn.Cell):
    """A torch submodule: holds its parameters and buffers and its children."""


class ModuleListCell(_TorchModule, nn.CellList):
    """A torch module whose children are numbered (Sequential, ModuleList): indexed as cell[i]."""


class OperatorSet(_Structural, nn.Cell):
    """The bridged operators of one graph (training or evaluation), one attribute per torch node."""

    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode

    def count(self) -> int:
        return sum(1 for k, v in vars(self).items() if isinstance(v, ops.Primitive)) + len(self._cells)

    def __repr__(self):
        return f"OperatorSet({self.count()} bridged operators, {self.mode})"


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
        self._build_modules(spec)
        self._parameters: dict[str, ms.Parameter] = {}
        for entry in spec.state:
            if entry.alias_of is None:
                tensor = initial_state[entry.key]
                self._parameters[entry.key] = parameter = self._add_parameter(entry, tensor)
                if share_weights:
                    with torch.no_grad():
                        tensor.data = torch_view(parameter)
        for entry in spec.state:
            if entry.alias_of is not None:
                self._parameters[entry.key] = self._parameters[entry.alias_of]
        for name, tensor in spec.constants.items():
            setattr(self, f"const_{name}", to_ms(tensor))
        self.assign = StateWrite()
        if spec.compile_programs:
            self._compile_programs(spec.training)
        for mode, operators in self.make_operators().items():
            setattr(self, f"ops_{mode}", operators)
        super().set_train(spec.training)
        flat = getattr(sys.modules[type(self).__module__], f"Flat{type(self).__name__}", None)
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
        if self._spec.compile_programs and self._compile_programs(self.training):
            self._rebuild_operators()  # switched mode through a parent's set_train
        args = self._positional(args, kwargs)
        self._check_inputs(args)
        graph_mode = ms.get_context("mode") == ms.GRAPH_MODE
        as_graph = graph_mode or self._runs_as_graph()
        spec = self._spec.out_spec
        flat_twin = self.__dict__.get("_flat_twin")
        with CALL_LOCK:  # one thread at a time (see _core/primitive.py: CALL_LOCK)
            try:
                if not graph_mode and as_graph:
                    result = self._pynative_graph()(args)
                    if flat_twin is not None:
                        return tree_unflatten(list(result), spec)
                elif graph_mode:
                    sync_phase(flat_twin or self, self.training)
                    if flat_twin is not None:
                        return tree_unflatten(list(flat_twin(*args)), spec)
                    result = super().__call__(*args)
                else:
                    result = super().__call__(*args)
            except Exception as exc:
                if as_graph:
                    self._forget_compiled_graphs()
                named = named_kernel_failure(exc, f"{self.module_name} (ported)")
                if named is not None:
                    raise named from exc
                raise
        # construct returns dicts for dict-like outputs (a ModelOutput cannot be built inside a graph)
        return tree_unflatten(_leaves(result, spec), spec) if _has_custom_containers(spec) else result

    @property
    def input_names(self) -> tuple[str, ...]:
        """The cell's inputs in call order, named as the torch module's forward names them (tensors given
        positionally, then the tensor keyword arguments of the port)."""
        return tuple(spec.name for spec in self._spec.inputs)

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

    def _positional(self, args: tuple, kwargs: dict) -> tuple:
        """The inputs in the order construct takes them, keyword arguments placed by name (the module's own)."""
        if not kwargs:
            return args
        names = [spec.name for spec in self._spec.inputs]
        values = list(args) + [_MISSING] * (len(names) - len(args))
        for key, value in kwargs.items():
            if key not in names:
                raise TypeError(f"{self.module_name} got an unexpected keyword argument '{key}' (its inputs: "
                                f"{', '.join(names)})")
            k = names.index(key)
            if k < len(args):
                raise TypeError(f"{self.module_name} got multiple values for argument '{key}'")
            values[k] = value
        missing = [n for n, v in zip(names, values) if v is _MISSING]
        if missing:
            raise TypeError(f"{self.module_name} is missing input(s): {', '.join(missing)}")
        return tuple(values)

    def _forget_compiled_graphs(self) -> None:
        """After a kernel failed, MindSpore 2.10 fails every later run of that compiled graph with an empty
        RuntimeError (built-in operators too); a new creation time gives the next call a freshly compiled graph."""
        for cell in (self, self.__dict__.get("_flat_twin")):
            if cell is not None:
                recompile_on_next_call(cell)

    def _check_inputs(self, args) -> None:
        """The inputs' shapes and dtypes against those the module was ported for (construct checks again, for calls
        from other graphs; here MindSpore's own checks of dynamic inputs would come first)."""
        specs = self._spec.inputs
        if len(args) != len(specs):
            raise TypeError(f"{self.module_name} takes {len(specs)} input(s) ({', '.join(s.name for s in specs)}), "
                            f"got {len(args)}")
        for spec, arg in zip(specs, args):
            shape = tuple(getattr(arg, "shape", ()))
            dtype = getattr(arg, "dtype", None)
            if len(shape) != len(spec.shape) or any(n is not None and n != d for n, d in zip(spec.shape, shape)):
                raise ValueError(expected_shape(self.module_name, spec) + str(shape))
            if dtype != _dtypes.to_ms(spec.dtype):
                raise TypeError(expected_dtype(self.module_name, spec) + str(dtype))

    # ---- structure ---------------------------------------------------------------------------------------------

    def make_operators(self) -> dict[str, OperatorSet]:
        raise NotImplementedError  # generated

    def make_program(self, mode: str, bprop_factory) -> AotOp:
        """The forward program of `mode` (fuse=True) as one operator, its bprop calling the backward program."""
        fused = self._spec.fused[mode]
        bprop = None
        if bprop_factory is not None:
            constants = tuple(getattr(self, f"const_{mode}_{name}") for name in fused.backward_constants)
            bprop = bprop_factory(_program_operator(fused.backward, eager_front=False), constants)
        return _program_operator(fused.forward, bprop)

    def make_inference(self, mode: str, bprop_factory) -> AotOp:
        """The inference program of `mode` (fuse=True: the module's outputs, nothing saved) as one operator; its
        bprop runs the forward program again, then the backward program."""
        fused = self._spec.fused[mode]
        bprop = None
        if bprop_factory is not None:
            forward_constants = tuple(getattr(self, f"const_{mode}_{name}") for kind, name in fused.inputs
                                      if kind == "constant" and name.startswith("f_"))
            constants = tuple(getattr(self, f"const_{mode}_{name}") for name in fused.backward_constants)
            bprop = bprop_factory(_program_operator(fused.forward, eager_front=False),
                                  _program_operator(fused.backward, eager_front=False), forward_constants, constants)
        return _program_operator(fused.inference, bprop)

    def _build_modules(self, spec: PortSpec) -> None:
        structure = Structure(spec.modules, (entry.key for entry in spec.state))
        cells: dict[str, nn.Cell] = {"": self}
        if structure.root_is_list:  # nn.Sequential itself: its numbered children in a CellList
            self.layers = ModuleListCell(spec.module_name, "")
        for path, kind in spec.modules:
            if not path:
                continue
            counts = _describe_counts(spec.operator_counts, path)
            cell = (ModuleListCell if path in structure.lists else ModuleCell)(kind, counts)
            parent_path, _, name = path.rpartition(".")
            if parent_path in structure.lists:
                (self.layers if parent_path == "" else cells[parent_path]).append(cell)
            else:
                _check_free(cells[parent_path], attribute_name(name), path)
                setattr(cells[parent_path], attribute_name(name), cell)
            cells[path] = cell
        self._cells_by_path = cells

    def _add_parameter(self, entry: StateEntry, tensor: torch.Tensor) -> ms.Parameter:
        parent_path, _, name = entry.key.rpartition(".")
        holder = self._cells_by_path[parent_path]
        _check_free(holder, attribute_name(name), entry.key)
        # A Parameter copies its initial data: handing it a view of the torch tensor makes that the only copy
        tensor = tensor.detach()
        initial = ms_view(tensor) if tensor.is_contiguous() else to_ms(tensor)
        parameter = ms.Parameter(initial, name=entry.key, requires_grad=entry.trainable)
        setattr(holder, attribute_name(name), parameter)
        return parameter

    def extend_repr(self):
        return f"{self.module_name}{_describe_counts(self._spec.operator_counts, '')}"

    # ---- training and evaluation -------------------------------------------------------------------------------

    def set_train(self, mode: bool = True):
        if mode and self._spec.refused_training:
            raise PortError(self._spec.refused_training)
        if self._spec.compile_programs and self._compile_programs(mode):
            self._rebuild_operators()
        return super().set_train(mode)

    # ---- fuse="compile" ----------------------------------------------------------------------------------------

    def _compile_programs(self, training: bool) -> bool:
        """Compiles what the cell runs in that mode, once (compiled.py): a training step's forward and backward
        programs, or evaluation's inference program. Each graph is compiled when first needed, as compiling takes
        seconds. True if a program changed (the operators must then be rebuilt)."""
        fused = self._spec.fused
        mode = Mode.running(training, fused)
        if mode not in fused:
            return False
        return fused[mode].compile(("forward", "backward") if training else ("inference",))

    def _rebuild_operators(self) -> None:
        for mode, operators in self.make_operators().items():
            setattr(self, f"ops_{mode}", operators)
        self._forget_compiled_graphs()  # GRAPH_MODE compiles the graphs again, with the new operators

    # ---- weights both ways -------------------------------------------------------------------------------------

    def torch_state_dict(self) -> "collections.OrderedDict[str, torch.Tensor]":
        """The module's state_dict (same keys, torch tensors) with this cell's current values: load it into the
        torch module with module.load_state_dict."""
        return collections.OrderedDict((e.key, to_torch(self._parameters[e.key].value()))
                                       for e in self._spec.state if e.persistent)

    def load_torch_state_dict(self, state_dict: Mapping[str, torch.Tensor], strict: bool = True) -> IncompatibleKeys:
        """Copies a torch state_dict (of the ported module, e.g. a checkpoint) into this cell's Parameters.
        Shapes and dtypes must match; with strict=True (as torch) every key must be present and known."""
        expected = [e.key for e in self._spec.state if e.persistent]
        missing = [k for k in expected if k not in state_dict]
        unexpected = [k for k in state_dict if k not in self._parameters or k not in expected]
        if strict and (missing or unexpected):
            raise PortError(f"{self.module_name}: state_dict does not match (missing keys: {missing}; unexpected "
                            f"keys: {unexpected})")
        for key, value in state_dict.items():
            if key in unexpected:
                continue
            parameter = self._parameters[key]
            value = torch.as_tensor(value)
            target = tuple(parameter.shape)
            if tuple(value.shape) != target:
                raise PortError(f"{self.module_name}: '{key}' has shape {tuple(value.shape)}, the cell's parameter "
                                f"has {target}")
            # Into the Parameter's own memory (not set_data, which replaces it): a torch module sharing its weights
            # with the cell keeps sharing them
            ms.runtime.synchronize()  # no queued MindSpore work still reads the old values
            with torch.no_grad():
                torch_view(parameter).copy_(value.to(to_torch_dtype(parameter)))
        return IncompatibleKeys(missing, unexpected)


def _program_operator(program, bprop=None, eager_front: bool = True) -> AotOp:
    """One program (program.py) as an operator of the bundled library's program entry. A backward program runs
    inside MindSpore's bprop, where ops.Custom is faster than the PyNative front (see _core/opdef.py)."""
    dtypes = list(program.out_dtypes)
    # A fresh identity: the attributes hold the whole program, too long to spell out as a stable one.
    return OpDef(library_path(), program.symbol, program.attrs, bprop=bprop, arity=program.arity,
                 infer=CppInference(lambda _dtypes: dtypes), identity=FRESH, eager_front=eager_front).build()


def to_torch_dtype(parameter: ms.Parameter) -> torch.dtype:
    return _dtypes.to_torch(parameter.dtype)


class Structure:
    """Where each torch submodule sits in the ported cell: numbered children (Sequential, ModuleList) form a
    CellList, indexed as [i]; a root with numbered children keeps them in `self.layers`. A module that also holds
    parameters or buffers of its own (a ParametrizationList: `original0` beside its numbered parametrizations) is
    a plain Cell with `item_<i>` children instead, as GRAPH_MODE reads a CellList as a tuple, which has no
    attributes."""

    def __init__(self, modules: list[tuple[str, str]], state_keys: Iterable[str] = ()):
        children: dict[str, list[str]] = collections.defaultdict(list)
        for path, _kind in modules:
            if path:
                parent, _, name = path.rpartition(".")
                children[parent].append(name)
        holders = {key.rpartition(".")[0] for key in state_keys}
        self.lists = {p for p, names in children.items()
                      if names == [str(k) for k in range(len(names))] and p not in holders}
        self.root_is_list = "" in self.lists
        self.expressions = {"": "self"}
        for path, _kind in modules:
            if path:
                parent, _, name = path.rpartition(".")
                base = "self.layers" if parent == "" and self.root_is_list else self.expressions[parent]
                self.expressions[path] = (f"{base}[{name}]" if parent in self.lists
                                          else f"{base}.{attribute_name(name)}")

    def state_expression(self, key: str) -> str:
        """Python expression of a state entry's Parameter from the root cell: "self.layer1[0].conv1.weight"."""
        parent, _, name = key.rpartition(".")
        return f"{self.expressions[parent]}.{attribute_name(name)}"


def attribute_name(name: str) -> str:
    """The attribute of a ported cell that holds the torch submodule or tensor called `name` in its parent. Names
    that are not Python identifiers (nn.ParameterList's "0", nn.ModuleDict's or nn.ParameterDict's free-form keys)
    become "item_<name>" with every other character replaced by "_": the generated construct reads attributes by
    name, and the Parameters keep their state_dict keys as their names whatever the attribute is."""
    if name.isidentifier() and not keyword.iskeyword(name):
        return name
    return "item_" + "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _check_free(cell: nn.Cell, name: str, path: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name) or hasattr(cell, name) or name in _RESERVED:
        raise PortError(f"'{path}': the name '{name}' cannot be a MindSpore Cell attribute (it is not an "
                        "identifier, or Cell uses it); rename it in the torch module")


_RESERVED = {"training", "assign"}
_MISSING = object()


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


def _describe_counts(counts: dict[str, dict[str, int]], path: str) -> str:
    """", 12 bridged operators" for the module at `path` and its children (per mode when they differ)."""
    per_mode = {mode: sum(n for p, n in by_path.items() if p == path or p.startswith(path + ".") or not path)
                for mode, by_path in counts.items()}
    values = set(per_mode.values())
    if not values or values == {0}:
        return ""
    if len(values) == 1:
        n = values.pop()
        return f", {n} bridged operator{'s' if n != 1 else ''}"
    return ", bridged operators: " + ", ".join(f"{n} in {Mode(m).label}" for m, n in per_mode.items())
