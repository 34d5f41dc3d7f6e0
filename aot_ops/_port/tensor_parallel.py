"""A transformers model split over the ranks of a MindSpore job by its own tensor-parallel plan.

transformers ships a plan with every decoder (`config.base_model_tp_plan`, and the LM head's in the model class's
`_tp_plan`): the query/key/value and gate/up projections "colwise" (each rank computes its own output features:
its heads, its slice of the MLP), the output and down projections "rowwise" (each rank multiplies its slice of the
input features; the partial products are summed over the ranks), the LM head "colwise_gather_output" (each rank
its slice of the vocabulary, the logits gathered). `shard_by_plan` applies that plan to the model in place on this
rank: each layer keeps only its rank's slice of the weight, and the layers meet through the three tensor-parallel
regions (parallel_regions.py: a column-parallel layer's input copied, its gradient summed over the ranks; a
row-parallel layer's partial products summed, its gradient passed as it is; the logits gathered, their gradient
sliced), which the port runs as MindSpore's AllReduce and AllGather with those gradients (distributed.py): the split
model evaluates and trains. The attention needs no change: transformers' attention views its projections with -1
heads, and the query and key/value heads are split alike, so each rank's groups of grouped-query attention stay
whole. Norms stay replicated.

LoRA (peft) on a split base: peft first, then the split (`tensor_parallel(get_peft_model(model, config))`). A planned
layer peft wrapped keeps its wrapper; its base layer is split as the plan says, and each adapter so that its
product meets the base's where the base's does: for a column-parallel base, B keeps the base's output features
(column-parallel itself: the gradient of its input, A's output, summed over the ranks, so that A's gradient is the
whole model's on every rank); for a row-parallel one, A keeps the base's input features (row-parallel itself: its
r-wide output summed over the ranks) and B stays whole. docs/distributed.md.
"""
from __future__ import annotations

import fnmatch

import torch
from torch import nn

from .._core.transformers_private import tensor_parallel_plan
from .errors import PortError
from .parallel_regions import copy, gather, reduce

PLAN_STYLES = ("colwise", "rowwise", "colwise_gather_output", "embedding_rowwise")


class _SplitLinear(nn.Module):
    """A linear layer of which this rank holds a slice along `split_dim` of the weight (0: output features, 1: input
    features); its weight and bias keep the names of the layer it replaces."""

    split_dim = 0

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, ranks: list[int], rank: int):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=weight.requires_grad)
        self.bias = None if bias is None else nn.Parameter(bias, requires_grad=bias.requires_grad)
        self.ranks, self.rank, self.position = ranks, rank, ranks.index(rank)


class RowParallelLinear(_SplitLinear):
    """This rank's input features of a linear layer; the partial products summed over the ranks, then the bias
    (whole on every rank, added once)."""

    split_dim = 1

    def forward(self, x):
        out = reduce(nn.functional.linear(x, self.weight), self.ranks)
        return out if self.bias is None else out + self.bias


class ColumnParallelGathered(_SplitLinear):
    """This rank's output features of a linear layer, gathered from every rank along the last dimension (the LM
    head's logits over the whole vocabulary)."""

    def forward(self, x):
        return gather(nn.functional.linear(copy(x, self.ranks), self.weight, self.bias), self.ranks, self.rank)


class ColumnParallelLinear(_SplitLinear):
    """This rank's output features of a linear layer (its heads, its slice of an MLP); the input's gradient summed
    over the ranks, each of which has its part."""

    def forward(self, x):
        return nn.functional.linear(copy(x, self.ranks), self.weight, self.bias)


_LINEAR_STYLES = {"colwise": ColumnParallelLinear, "rowwise": RowParallelLinear,
                  "colwise_gather_output": ColumnParallelGathered}


class VocabParallelEmbedding(nn.Module):
    """This rank's rows of an embedding (a slice of the vocabulary): each rank looks up the ids it holds, zeros
    elsewhere, and the rows are summed over the ranks, so every id's row comes from the one rank that has it."""

    def __init__(self, weight: torch.Tensor, start: int, ranks: list[int]):
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=weight.requires_grad)
        self.start, self.ranks = start, ranks

    def forward(self, ids):
        local = ids - self.start
        held = (local >= 0) & (local < self.weight.shape[0])
        rows = nn.functional.embedding(local.clamp(0, self.weight.shape[0] - 1), self.weight)
        return reduce(rows * held.unsqueeze(-1).to(rows.dtype), self.ranks)


def tensor_parallel(model: nn.Module, plan: dict[str, str] | None = None, *, size: bool | int = True) -> nn.Module:
    """`model` split in place over the ranks of this MindSpore job (msrun) by its tensor-parallel plan
    (shard_by_plan), torch.distributed set up for tracing it (distributed.torch_process_group). `size`: True, or
    the number of ranks, which must be the job's. Port it with from_torch on every rank."""
    from .distributed import split_over_job

    rank, ranks = split_over_job(size, f"tensor_parallel({type(model).__name__})", "size")
    return shard_by_plan(model, rank, ranks, plan)


def shard_by_plan(model: nn.Module, rank: int, size: int, plan: dict[str, str] | None = None) -> nn.Module:
    """Splits `model`'s linear layers over `size` ranks in place, keeping rank `rank`'s slices (plan: module path
    patterns, `*` for a layer number, to a style of PLAN_STYLES; default the model's own, as transformers builds
    it, or a peft model's base model's). Every matched layer must divide by `size`, and so must the attention's
    key/value heads; a pattern matching nothing or a style not in PLAN_STYLES is named. Returns the model."""
    plan = _own_plan(model) if plan is None else plan
    if not plan:
        raise PortError(f"{type(model).__name__} has no tensor-parallel plan of its own (transformers gives one with "
                        "config.base_model_tp_plan); pass plan={'module.path.*': style}")
    for pattern, style in plan.items():
        if style not in PLAN_STYLES:
            raise PortError(f"tensor-parallel plan: '{pattern}' is '{style}'; the styles bridged are "
                            f"{', '.join(PLAN_STYLES)}")
    _check_heads(model, size)
    ranks = list(range(size))
    matched = {pattern: 0 for pattern in plan}
    slices: dict[tuple, nn.Parameter] = {}  # by the whole weight and the slice: tied weights stay tied
    for path, module in list(model.named_modules()):
        pattern = next((p for p in plan if fnmatch.fnmatchcase(path, p)), None)
        if pattern is None:
            continue
        matched[pattern] += 1
        style = plan[pattern]
        if _is_lora(module):
            _split_lora(path, module, style, rank, size, ranks)
            continue
        wanted = nn.Embedding if style == "embedding_rowwise" else nn.Linear
        if not isinstance(module, wanted):
            raise PortError(f"tensor-parallel plan: {path} is a {type(module).__name__}, which '{style}' cannot "
                            f"split (it splits {wanted.__name__} layers)")
        sharded = _sharded(path, module, style, rank, size, ranks)
        # a tied input and output embedding (the LM head's weight the embedding's) split by vocabulary alike: one
        # slice, still tied
        rows = (style in ("embedding_rowwise", "colwise_gather_output"), sharded.weight.shape)
        tied = slices.setdefault((id(module.weight), rows), sharded.weight)
        if tied is not sharded.weight:
            sharded.weight = tied
        _replace(model, path, sharded)
    missing = [p for p, n in matched.items() if n == 0]
    if missing:
        raise PortError(f"tensor-parallel plan: no module of {type(model).__name__} matches {missing}")
    return model


def _own_plan(model: nn.Module) -> dict[str, str]:
    """The model's own plan; for a peft model, its base model's under the path peft holds it at."""
    if not hasattr(model, "get_base_model"):
        return tensor_parallel_plan(model)
    base = model.get_base_model()
    prefix = next(path for path, module in model.named_modules() if module is base)
    return {f"{prefix}.{pattern}" if prefix else pattern: style
            for pattern, style in tensor_parallel_plan(base).items()}


def _is_lora(module: nn.Module) -> bool:
    """A layer peft's LoRA wraps: its base layer and the adapters' A and B layers by adapter name."""
    return all(isinstance(getattr(module, name, None), nn.Module) for name in ("base_layer", "lora_A", "lora_B"))


def _split_lora(path: str, module: nn.Module, style: str, rank: int, size: int, ranks: list[int]) -> None:
    """A LoRA layer split in place: its base layer by `style`, each adapter to meet it (the module's docstring)."""
    if style not in ("colwise", "rowwise") or not isinstance(module.base_layer, nn.Linear):
        raise PortError(f"tensor-parallel plan: {path} carries LoRA adapters on a {type(module.base_layer).__name__} "
                        f"split '{style}'; adapters are split on 'colwise' and 'rowwise' linear layers: leave "
                        "this layer out of the adapter's target_modules")
    variants = sorted(getattr(module, "lora_variant", {}) or {})
    if variants:
        raise PortError(f"tensor-parallel plan: {path} carries a LoRA variant (adapter {variants[0]}: DoRA or "
                        "another), whose weight norms need the whole weight; plain LoRA adapters are split")
    module.base_layer = _sharded(f"{path}.base_layer", module.base_layer, style, rank, size, ranks)
    split = "lora_B" if style == "colwise" else "lora_A"  # the adapter's layer that meets the base's split
    adapters = getattr(module, split)
    for name in list(adapters):
        adapters[name] = _sharded(f"{path}.{split}.{name}", adapters[name], style, rank, size, ranks)


def _check_heads(model: nn.Module, size: int) -> None:
    config = getattr(model, "config", None)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if heads is not None and (heads % size or kv_heads % size):
        raise PortError(f"{type(model).__name__}: {heads} attention heads and {kv_heads} key/value heads do not "
                        f"split over {size} ranks (both must divide by it)")


def _sharded(path: str, layer: nn.Module, style: str, rank: int, size: int, ranks: list[int]) -> nn.Module:
    if style == "embedding_rowwise":
        rows = layer.weight.shape[0]
        if rows % size:
            raise PortError(f"tensor-parallel plan: {path} has {rows} rows, which do not split over {size} ranks")
        start = rank * rows // size
        with torch.no_grad():
            weight = layer.weight[start:start + rows // size].clone().requires_grad_(layer.weight.requires_grad)
        return VocabParallelEmbedding(weight, start, ranks)
    split = _LINEAR_STYLES[style]
    dim = split.split_dim
    features = layer.weight.shape[dim]
    if features % size:
        raise PortError(f"tensor-parallel plan: {path} has {features} {'input' if dim else 'output'} features, "
                        f"which do not split over {size} ranks")
    part = slice(rank * features // size, (rank + 1) * features // size)
    with torch.no_grad():
        weight = (layer.weight[:, part] if dim else layer.weight[part]).clone()
        weight.requires_grad_(layer.weight.requires_grad)
        bias = None
        if layer.bias is not None:  # sliced with the output features; whole where the input features are split
            bias = (layer.bias if dim else layer.bias[part]).clone().requires_grad_(layer.bias.requires_grad)
    return split(weight, bias, ranks, rank)


def _replace(model: nn.Module, path: str, new: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, name, new)


def shares(model: nn.Module) -> dict[str, tuple[int, int, int, int]]:
    """Each split tensor of a model split by shard_by_plan, by its state_dict key: (the dimension it is split
    along, where this rank's share starts and stops, the whole tensor's size along it). A tensor not named is whole
    on every rank. What a rank reads of a checkpoint (lm/pretrained.py)."""
    found = {}
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        if isinstance(module, VocabParallelEmbedding):
            rows = module.weight.shape[0]
            found[prefix + "weight"] = (0, module.start, module.start + rows, rows * len(module.ranks))
        elif isinstance(module, _SplitLinear):
            dim = module.split_dim
            width, count = module.weight.shape[dim], len(module.ranks)
            part = (module.position * width, (module.position + 1) * width, width * count)
            found[prefix + "weight"] = (dim, *part)
            if module.bias is not None and dim == 0:
                found[prefix + "bias"] = (0, *part)
    return found
