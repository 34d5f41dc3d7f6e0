"""The cell stage of a port: the generated Cell class (codegen.py) and its instance holding the module's weights
(cell.py)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import torch

from ..modes import constant_attribute
from ..plan import Plan
from ..programs.pieces import Piece
from .cell import PortedCell, PortSpec, StateEntry
from .codegen import generate
from .module_tree import Structure


def cell(model: torch.nn.Module, plan: Plan, input_grads: bool, fuse: bool | str, jit: bool,
         share_weights: bool) -> PortedCell:
    """The generated cell class (codegen.py) and its instance, holding the module's weights."""
    name = type(model).__name__
    class_name = "Ported" + "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    graphs = {mode: use.graph for mode, use in plan.uses.items()}
    # A graph with collectives is fused piece by piece (programs/pieces.py), its cell written as a per-node one's
    pieces = {(mode, step.name): step.fused for mode, g in graphs.items() for step in g.steps
              if isinstance(step, Piece)}
    fused = {mode: use.fused for mode, use in plan.uses.items()} if fuse and not pieces else {}
    modules = [(path, type(m).__name__) for path, m in model.named_modules()]
    state, initial_state = _state_entries(model)
    structure = Structure(modules, (entry.key for entry in state), {e.key: e.alias_of for e in state if e.alias_of})
    source = generate(class_name, name, graphs, plan.no_training, structure, fused or None,
                      input_grads, backward=plan.backward)
    cls, path = _load_class(class_name, source)
    first = next(iter(graphs.values()))
    spec = PortSpec(
        module_name=name, modules=modules, state=state,
        constants={constant_attribute(mode, k): v for mode, g in (fused or graphs).items()
                   for k, v in g.constants.items()},
        inputs=first.inputs, out_spec=first.out_spec, training=model.training and plan.backward,
        no_training=plan.no_training,
        operator_counts={mode: dict(Counter(op.module for op in g.operators)) for mode, g in graphs.items()},
        fused=fused, compile_on_first_use=fuse == "compile", jit=jit,
        pieces=pieces,
        functions=tuple({f for use in plan.uses.values() for f in use.functions}),
        split=_split(model) if any(g.collectives for g in graphs.values()) else {},
        flat_shards=_flat_shards(model))
    cell = cls(spec, initial_state, share_weights)
    cell.source_file = str(path)
    return cell


def _split(model: torch.nn.Module) -> dict:
    from ..tensor_parallel import shares

    return shares(model)


def _flat_shards(model: torch.nn.Module) -> dict:
    from ..sharded import flat_shards

    return flat_shards(model)


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


def _load_class(class_name: str, source: str) -> tuple[type, Path]:
    """The generated class, from a file in the build cache named by the source's hash (GRAPH_MODE parses the
    source of construct, and needs its module importable by name)."""
    from ..._build.generated import import_generated

    module, path = import_generated(class_name, source, folder="ported")
    return getattr(module, class_name), path
