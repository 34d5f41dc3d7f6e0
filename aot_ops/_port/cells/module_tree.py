"""The torch module's structure as MindSpore cells: nested Cells named as the module's submodules, so parameters
are named as in the state_dict ("layer1.0.conv1.weight"; under a parent Cell MindSpore prefixes them, as torch does)
and print(cell) shows the module tree with the number of bridged operators each module makes. Numbered children
(Sequential, ModuleList) become a CellList.
"""
from __future__ import annotations

import collections
import keyword
from typing import Iterable

import mindspore as ms
import torch
from mindspore import nn, ops

from ..._core.convert import ms_view, to_ms
from ..._core.mindspore_private import KeepsCompilePhase
from ..errors import PortError
from ..modes import Mode


class _TorchModule(KeepsCompilePhase):
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


class OperatorSet(KeepsCompilePhase, nn.Cell):
    """The bridged operators of one graph (training or evaluation), one attribute per torch node."""

    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode

    def count(self) -> int:
        return sum(1 for k, v in vars(self).items() if isinstance(v, ops.Primitive)) + len(self._cells)

    def __repr__(self):
        return f"OperatorSet({self.count()} bridged operators, {self.mode})"


def build_module_cells(root: nn.Cell, spec) -> dict[str, nn.Cell]:
    """The torch module's submodules as cells under `root` (a PortSpec's modules, parents first); every cell by
    its module path ("" for the root)."""
    structure = Structure(spec.modules, (entry.key for entry in spec.state))
    cells: dict[str, nn.Cell] = {"": root}
    if structure.root_is_list:  # nn.Sequential itself: its numbered children in a CellList
        root.layers = ModuleListCell(spec.module_name, "")
    for path, kind in spec.modules:
        if not path:
            continue
        counts = describe_counts(spec.operator_counts, path)
        cell = (ModuleListCell if path in structure.lists else ModuleCell)(kind, counts)
        parent_path, _, name = path.rpartition(".")
        if parent_path in structure.lists:
            (root.layers if parent_path == "" else cells[parent_path]).append(cell)
        else:
            check_free(cells[parent_path], attribute_name(name), path)
            setattr(cells[parent_path], attribute_name(name), cell)
        cells[path] = cell
    return cells


def add_parameter(cells: dict[str, nn.Cell], entry, value: torch.Tensor | ms.Parameter) -> ms.Parameter:
    """A Parameter holding a state entry's initial value (a StateEntry), set on the cell of its module: a copy of a
    torch tensor, or a Parameter taken as it is (weights already in MindSpore's memory: load_pretrained)."""
    parent_path, _, name = entry.key.rpartition(".")
    holder = cells[parent_path]
    check_free(holder, attribute_name(name), entry.key)
    if isinstance(value, ms.Parameter):
        parameter = value
        parameter.name = entry.key
        parameter.requires_grad = entry.trainable
    else:
        # A Parameter copies its initial data: handing it a view of the torch tensor makes that the only copy
        tensor = value.detach()
        initial = ms_view(tensor) if tensor.is_contiguous() else to_ms(tensor)
        parameter = ms.Parameter(initial, name=entry.key, requires_grad=entry.trainable)
    setattr(holder, attribute_name(name), parameter)
    return parameter


class Structure:
    """Where each torch submodule sits in the ported cell: numbered children (Sequential, ModuleList) form a
    CellList, indexed as [i]; a root with numbered children keeps them in `self.layers`. A module that also holds
    parameters or buffers of its own (a ParametrizationList: `original0` beside its numbered parametrizations) is
    a plain Cell with `item_<i>` children instead, as GRAPH_MODE reads a CellList as a tuple, which has no
    attributes. `aliases`: a tied entry's key -> the key whose Parameter it is (state_expression names that one).

    A generated method reads a CellList once, into a local (`bindings`), and indexes the local: MindSpore's parser
    resolves `self.blocks` to a tuple of all its cells at every mention, so `self.blocks[i].weight` for each of a
    network's parameters took time quadratic in its size (800 Parameters in a 400-item list: 7.3 s to compile a
    graph that reads them all, 0.7 s through a local; docs/performance.md)."""

    def __init__(self, modules: list[tuple[str, str]], state_keys: Iterable[str] = (),
                 aliases: dict[str, str] | None = None):
        self.aliases = aliases or {}
        children: dict[str, list[str]] = collections.defaultdict(list)
        for path, _kind in modules:
            if path:
                parent, _, name = path.rpartition(".")
                children[parent].append(name)
        holders = {key.rpartition(".")[0] for key in state_keys}
        self.lists = {p for p, names in children.items()
                      if names == [str(k) for k in range(len(names))] and p not in holders}
        self.root_is_list = "" in self.lists
        self.expressions = {"": "self"}       # module path -> its Cell, from the root or a list's local
        self.list_locals: dict[str, str] = {}  # list path -> the local a method reads it into
        for path, _kind in modules:
            if not path:
                continue
            parent, _, name = path.rpartition(".")
            if parent in self.lists:
                self.expressions[path] = f"{self._local(parent)}[{name}]"
            else:
                self.expressions[path] = f"{self.expressions[parent]}.{attribute_name(name)}"

    def _local(self, list_path: str) -> str:
        return self.list_locals.setdefault(list_path, f"_cells_{len(self.list_locals)}")

    def state_expression(self, key: str) -> str:
        """Python expression of a state entry's Parameter in a generated method: "_cells_0[0].conv1.weight", where
        the method's `bindings` read the lists it indexes first ("_cells_0 = self.layer1")."""
        parent, _, name = self.aliases.get(key, key).rpartition(".")
        return f"{self.expressions[parent]}.{attribute_name(name)}"

    def bindings(self, keys: Iterable[str]) -> list[str]:
        """The statements that read into their locals the lists the expressions of these state entries index,
        outer lists first."""
        needed: set[str] = set()
        for key in keys:
            path = self.aliases.get(key, key).rpartition(".")[0]
            while True:
                if path in self.lists:
                    needed.add(path)
                if not path:
                    break
                path = path.rpartition(".")[0]
        order = sorted(needed, key=lambda p: (p.count(".") + bool(p), p))
        return [f"{self.list_locals[p]} = {'self.layers' if p == '' else self.expressions[p]}" for p in order]


def attribute_name(name: str) -> str:
    """The attribute of a ported cell that holds the torch submodule or tensor called `name` in its parent. Names
    that are not Python identifiers (nn.ParameterList's "0", nn.ModuleDict's or nn.ParameterDict's free-form keys)
    become "item_<name>" with every other character replaced by "_": the generated construct reads attributes by
    name, and the Parameters keep their state_dict keys as their names whatever the attribute is."""
    if name.isidentifier() and not keyword.iskeyword(name):
        return name
    return "item_" + "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def check_free(cell: nn.Cell, name: str, path: str) -> None:
    if not name.isidentifier() or keyword.iskeyword(name) or hasattr(cell, name) or name in RESERVED:
        raise PortError(f"'{path}': the name '{name}' cannot be a MindSpore Cell attribute (it is not an "
                        "identifier, or Cell uses it); rename it in the torch module")


RESERVED = {"training", "assign"}


def describe_counts(counts: dict[str, dict[str, int]], path: str) -> str:
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
