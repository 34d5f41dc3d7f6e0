"""Sharded data parallel (ZeRO-3, torch's FSDP): each rank of a MindSpore job holds 1/N of every parameter.

`shard(model)` changes the torch model in place on this rank. Its parameters are grouped by unit: each repeated
layer (a transformers model's `_no_split_modules` classes, else each layer of a ModuleList) is a unit, so are a
transformers model's input and output embeddings (unless tied), and the model itself the last, holding the
parameters no other unit holds (the final norm; tied embeddings). A unit's
parameters become one flat tensor, padded to a multiple of the ranks, of which this rank keeps its 1/N block as
the unit's only Parameter (`flat_shard`; `frozen_flat_shard` for those without requires_grad, a LoRA's base), in
`master_dtype` (float32: the master weights of a bfloat16 model). Before the unit runs, a forward pre-hook gathers
its flat shards (parallel_regions.unshard: all-gather forward, the gradient reduce-scattered and averaged over the
ranks backward) and gives each of its modules views of the gathered tensor where its parameters stood, in their
own dtype; after it runs they go.

Ported (from_torch), each gather is a collective, which fused ports cut at (programs/pieces.py); a piece taking a
layer's gathered weights gathers them inside its own operator's cell and again in its backward instead of keeping
them (distributed.GatheredPiece), so a layer's whole weights live only while it runs, forward or backward. Each
rank feeds its own part of the batch; the gradients reaching each shard are the whole batch's mean loss's, so
MindSpore's optimizer over the cell's Parameters (AdamW, SGD) updates each rank's shard as single-process training
updates the whole. The cell's torch_state_dict() gathers the shards back into the model's own keys (which torch
loads); torch_state_dict(gather=False) is this rank's shards (a per-rank checkpoint). docs/distributed.md.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field

import torch
from torch import nn

from .._core.torch_private import own_parameters
from .._core.transformers_private import no_split_classes
from .errors import PortError
from .parallel_regions import unshard

TRAINABLE, FROZEN = "flat_shard", "frozen_flat_shard"  # a unit's shard Parameters, by requires_grad


@dataclass
class FlatLayout:
    """One flat shard of a unit: which parameters it holds and where (offsets into the gathered flat tensor)."""

    attribute: str                 # the unit's Parameter holding this rank's block (TRAINABLE or FROZEN)
    dtype: torch.dtype             # the parameters' own dtype, which the gather gives
    numel: int                     # the parameters' elements together (the rest of the gathered tensor is padding)
    ranks: list[int]
    # (state_dict keys relative to the unit: several for a tied parameter, shape, offset) per parameter
    entries: list[tuple[list[str], torch.Size, int]] = field(default_factory=list)
    # per entry: (the module's path in the unit, its attribute); by path, as the port traces a copy of the modules
    slots: list[list[tuple[str, str]]] = field(default_factory=list)


def shard(model: nn.Module, *, size: bool | int = True, units: list[str] | None = None,
          master_dtype: torch.dtype | None = torch.float32) -> nn.Module:
    """`model` sharded in place over the ranks of this MindSpore job (msrun): see the module's docstring. `size`:
    True, or the number of ranks, which must be the job's. `units`: module path patterns (`*` for a layer
    number) of the units, default the model's repeated layers and its untied embeddings. `master_dtype`: the shards' dtype for floating
    parameters of a narrower one (None: their own). Port it with from_torch on every rank, each rank calling it
    with its own part of the batch."""
    from .distributed import split_over_job

    rank, ranks = split_over_job(size, f"shard({type(model).__name__})", "size")
    return shard_over(model, rank, ranks, units, master_dtype)


def shard_over(model: nn.Module, rank: int, size: int, units: list[str] | None = None,
               master_dtype: torch.dtype | None = torch.float32) -> nn.Module:
    """shard() for rank `rank` of `size` ranks, without MindSpore's communication (what shard calls)."""
    if any(getattr(m, "_aot_ops_flats", None) for m in model.modules()):
        raise PortError(f"shard({type(model).__name__}): the model is sharded already")
    found = _units(model, units)
    owner: dict[int, str] = {}
    for path, unit in found + [("", model)]:
        inner = [u for p, u in found if u is not unit and (not path or p.startswith(path + "."))]
        _shard_unit(model, path, unit, inner, rank, size, master_dtype, owner)
    return model


def _units(model: nn.Module, patterns: list[str] | None) -> list[tuple[str, nn.Module]]:
    """(path, module) of each unit but the model itself, outermost first, none inside another."""
    if patterns is not None:
        chosen = [(p, m) for p, m in model.named_modules() if p and any(fnmatch.fnmatchcase(p, q) for q in patterns)]
        unmatched = [q for q in patterns if not any(fnmatch.fnmatchcase(p, q) for p, _ in chosen)]
        if unmatched:
            raise PortError(f"shard({type(model).__name__}): no module matches the units {unmatched}")
    else:
        classes = set(no_split_classes(model))
        chosen = [(p, m) for p, m in model.named_modules() if p and type(m).__name__ in classes]
        if not chosen:  # each layer of a ModuleList
            chosen = [(f"{p}.{k}" if p else str(k), layer) for p, m in model.named_modules()
                      if isinstance(m, nn.ModuleList) for k, layer in enumerate(m)]
        chosen += _embeddings(model)
    outermost = []
    for path, module in chosen:
        if not any(path.startswith(p + ".") for p, _ in outermost):
            outermost.append((path, module))
    return outermost


def _embeddings(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """A transformers model's input and output embeddings (of the model or of the model peft wraps), each a unit:
    the largest layers (a 32000-word vocabulary at width 2048 holds 1.5 decoder layers' parameters), gathered only
    while each runs. Tied (one tensor), they stay in the model's own unit."""
    for module in model.modules():
        if hasattr(module, "get_input_embeddings") and hasattr(module, "get_output_embeddings"):
            found = [m for m in (module.get_input_embeddings(), module.get_output_embeddings())
                     if isinstance(m, nn.Module)]
            if len(found) == 2 and found[0].weight is found[1].weight:
                return []
            paths = {id(m): p for p, m in model.named_modules()}
            return [(paths[id(m)], m) for m in found if paths.get(id(m))]
    return []


def _shard_unit(model: nn.Module, path: str, unit: nn.Module, inner: list[nn.Module], rank: int, size: int,
                master_dtype: torch.dtype | None, owner: dict[int, str]) -> None:
    """The unit's own parameters (not those of the units inside it) as flat shards, the hooks gathering them."""
    skip = {id(m) for u in inner for m in u.modules()}
    params: dict[int, tuple[nn.Parameter, list[tuple[str, nn.Module, str]]]] = {}
    for sub_path, module in unit.named_modules(remove_duplicate=False):
        if id(module) in skip:
            continue
        for name, param in own_parameters(module).items():
            if param is None:
                continue
            key = f"{sub_path}.{name}" if sub_path else name
            where = f"{path}.{key}" if path else key
            if owner.setdefault(id(param), path) != path:
                raise PortError(f"shard({type(model).__name__}): {where} is the same tensor as a parameter of "
                                f"'{owner[id(param)] or '(root)'}', another unit; tied parameters must be in one "
                                "unit (give units= without one of them)")
            params.setdefault(id(param), (param, []))[1].append((key, sub_path, name))
    if not params:
        return
    layouts = []
    for attribute, trainable in ((TRAINABLE, True), (FROZEN, False)):
        group = [(p, slots) for p, slots in params.values() if p.requires_grad == trainable]
        if not group:
            continue
        if attribute in own_parameters(unit) or hasattr(unit, attribute):
            raise PortError(f"shard({type(model).__name__}): {path or '(root)'} has an attribute '{attribute}' "
                            "already")
        dtypes = {p.dtype for p, _ in group}
        if len(dtypes) > 1:
            raise PortError(f"shard({type(model).__name__}): {path or '(root)'} holds parameters of "
                            f"{sorted(map(str, dtypes))}; a unit's parameters share one dtype")
        dtype = dtypes.pop()
        kept = dtype if master_dtype is None or not dtype.is_floating_point or \
            torch.finfo(dtype).bits >= torch.finfo(master_dtype).bits else master_dtype
        layout = FlatLayout(attribute, dtype, 0, list(range(size)))
        pieces = []
        for param, slots in group:
            layout.entries.append(([k for k, _, _ in slots], param.shape, layout.numel))
            layout.slots.append([(m, n) for _, m, n in slots])
            layout.numel += param.numel()
            pieces.append(param.detach().reshape(-1))
        per_rank = -(-layout.numel // size)
        with torch.no_grad():
            flat = torch.cat(pieces + [pieces[0].new_zeros(per_rank * size - layout.numel)])
            block = flat[rank * per_rank:(rank + 1) * per_rank].to(kept).clone()
        del flat, pieces
        for slots in layout.slots:
            for sub_path, name in slots:
                del own_parameters(unit.get_submodule(sub_path))[name]
        unit.register_parameter(attribute, nn.Parameter(block, requires_grad=trainable))
        layouts.append(layout)
    unit._aot_ops_flats = layouts
    unit.register_forward_pre_hook(_gather_parameters)
    unit.register_forward_hook(_release_parameters)


def _gather_parameters(unit: nn.Module, _args) -> None:
    for layout in unit._aot_ops_flats:
        whole = unshard(getattr(unit, layout.attribute), layout.ranks, layout.dtype)
        for (_keys, shape, offset), slots in zip(layout.entries, layout.slots):
            view = whole[offset:offset + shape.numel()].view(shape)
            for sub_path, name in slots:
                unit.get_submodule(sub_path).__dict__[name] = view


def _release_parameters(unit: nn.Module, _args, _output) -> None:
    for layout in unit._aot_ops_flats:
        for slots in layout.slots:
            for sub_path, name in slots:
                unit.get_submodule(sub_path).__dict__.pop(name, None)


def flat_shards(model: nn.Module) -> dict[str, FlatLayout]:
    """Each flat shard of a model sharded by shard(), by its state_dict key (its entries' keys made whole-model
    keys too): what torch_state_dict gathers back into the parameters' own keys."""
    found = {}
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        for layout in getattr(module, "_aot_ops_flats", ()):
            entries = [([prefix + k for k in keys], shape, offset) for keys, shape, offset in layout.entries]
            found[prefix + layout.attribute] = FlatLayout(layout.attribute, layout.dtype, layout.numel,
                                                          layout.ranks, entries)
    return found


def unflattened(state: dict, flats: dict[str, FlatLayout], gathered: dict[str, torch.Tensor]) -> dict:
    """`state` with each flat shard's key replaced by its parameters' keys, their values cut from `gathered` (the
    whole flat tensor of each flat key) and given their own dtype; tied parameters the same tensor."""
    whole = type(state)()
    for key, value in state.items():
        layout = flats.get(key)
        if layout is None:
            whole[key] = value
            continue
        flat = gathered[key][:layout.numel].to(layout.dtype)
        for keys, shape, offset in layout.entries:
            tensor = flat[offset:offset + shape.numel()].view(shape).clone()
            for k in keys:
                whole[k] = tensor
    return whole
