"""Grouped-query attention without copying the keys and values once per query head.

A transformers decoder with fewer key/value heads than query heads (Llama, Qwen2, Mistral, ...) calls `repeat_kv`
before scaled_dot_product_attention when it is traced: its keys and values, the whole cache when decoding, are
expanded to one copy per query head (`unsqueeze`, `expand`, `reshape`), a copy the size of the cache times the
group per layer and per token, which dominates a decoding step at large batches and long caches. transformers' own
eager decoding avoids it for a single query token (`pack_gqa`: the group's query heads become query rows of their
key/value head), but only outside tracing.

The same packing holds for any number of query positions: the query's heads (batch, kv_heads * group, q, dim) are
regrouped as (batch, kv_heads, group * q, dim), each key/value head attends with all its group's rows at once, and
the result is regrouped back. Each query row meets the same keys, values, scale and mask row as before; a mask
shared by the heads is repeated over the group's rows (group * q * keys booleans or floats, small beside the
keys and values). Not rewritten: causal attention without a mask (`is_causal=True` orders rows by position),
dropout, an explicit `enable_gqa`, anything not exactly that repeat pattern, and half precision (below). Only
graphs that are never differentiated are rewritten (a training graph keeps the repeat: its gradients then follow
torch's own).
"""
from __future__ import annotations

import torch
from torch.export import ExportedProgram

from .fake import mode_of
from .rewrites import rewrite_calls

_aten = torch.ops.aten
_SDPA = _aten.scaled_dot_product_attention.default
# Grouping changes how the attention's products are blocked (a key/value head's rows multiplied at once), and so
# their rounding: in float32 by about 1e-7 relative, in bfloat16 enough to change a greedy token at a near tie (a
# 1.1B Llama's parted from torch's at the 7th new token): half-precision graphs keep torch's repeat and its tokens.
_EXACT_DTYPES = (torch.float32, torch.float64)


def attend_per_key_value_head(program: ExportedProgram) -> int:
    """Rewrites each attention over repeated keys and values to attend per key/value head; the number rewritten."""
    return rewrite_calls(program, _SDPA, _rewrite)


def _rewrite(graph: torch.fx.Graph, sdpa: torch.fx.Node) -> bool:
    args = _sdpa_arguments(sdpa)
    if args is None:
        return False
    query, key, value, mask, scale = args
    if query.meta["val"].dtype not in _EXACT_DTYPES:
        return False
    keys, values = _repeated(key), _repeated(value)
    if keys is None or values is None or keys[1] != values[1]:
        return False
    group_size = keys[1]
    heads = _shape(query)[1]
    if not isinstance(heads, int) or heads != _shape(keys[0])[1] * group_size:
        return False
    if mask is not None and not _groupable_mask(mask, heads, _shape(query)[2]):
        return False
    with graph.inserting_before(sdpa):
        kv_heads = heads // group_size
        rows = _call(graph, _aten.flatten.using_ints,
                     _call(graph, _aten.unflatten.int, query, 1, [kv_heads, group_size]), 2, 3)
        grouped_mask = None if mask is None else _grouped_mask(graph, mask, heads, kv_heads, group_size)
        kwargs = {"attn_mask": grouped_mask, "scale": scale}  # a default scale: 1/sqrt(head size), unchanged
        attended = _call(graph, _SDPA, rows, keys[0], values[0], **kwargs)
        regrouped = _call(graph, _aten.flatten.using_ints,
                          _call(graph, _aten.unflatten.int, attended, 2, [group_size, -1]), 1, 2)
    sdpa.replace_all_uses_with(regrouped)
    graph.erase_node(sdpa)
    for repeat in (key, value):
        _erase_unused_chain(graph, repeat)
    return True


def _sdpa_arguments(sdpa: torch.fx.Node):
    """(query, key, value, mask, scale) of a call this rewrite keeps exact: no dropout, not causal, no enable_gqa."""
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    bound = dict(zip(names, sdpa.args)) | dict(sdpa.kwargs)
    if bound.get("dropout_p", 0.0) != 0.0 or bound.get("is_causal", False) or bound.get("enable_gqa", False):
        return None
    query = bound["query"]
    if len(_shape(query)) != 4:
        return None
    return query, bound["key"], bound["value"], bound.get("attn_mask"), bound.get("scale")


def _repeated(node) -> tuple[torch.fx.Node, int] | None:
    """(the key/value heads, the group) where `node` is repeat_kv's copy: reshape(expand(unsqueeze(x, 2))), the
    reshape as a functional graph writes it (clone, then _unsafe_view) or not."""
    if not _is_call(node, _aten.reshape.default, _aten.view.default, _aten._unsafe_view.default):
        return None
    expand = node.args[0]
    if _is_call(expand, _aten.clone.default) and expand.kwargs.get("memory_format") in (None, torch.contiguous_format):
        expand = expand.args[0]
    if not _is_call(expand, _aten.expand.default):
        return None
    unsqueeze = expand.args[0]
    if not _is_call(unsqueeze, _aten.unsqueeze.default) or unsqueeze.args[1] != 2:
        return None
    source, expanded = unsqueeze.args[0], _shape(expand)
    if len(expanded) != 5 or len(_shape(source)) != 4:
        return None
    batch, kv_heads, group, length, dim = expanded
    if not isinstance(group, int) or not isinstance(kv_heads, int):
        return None
    if list(_shape(node)) != [batch, kv_heads * group, length, dim] or _shape(source)[1] != kv_heads:
        return None
    return source, group


def _groupable_mask(mask, heads: int, rows) -> bool:
    shape = _shape(mask)
    if len(shape) != 4 or shape[1] not in (1, heads):
        return False
    # a per-head mask with one row for several query rows (a padding mask) would need repeating per row: as traced
    return not (shape[1] == heads and _is_one(shape[2]) and not _is_one(rows))


def _grouped_mask(graph, mask, heads: int, kv_heads: int, group_size: int):
    """The mask's rows in the order of the grouped query's: (batch, kv_heads or 1, group * q, keys)."""
    shape = _shape(mask)
    if shape[1] == 1 and _is_one(shape[2]):
        return mask  # one row for every row of every head (a padding mask): it broadcasts over the grouped rows too
    if shape[1] == heads:
        per_head = _call(graph, _aten.unflatten.int, mask, 1, [kv_heads, group_size])
    else:
        per_head = _call(graph, _aten.expand.default, _call(graph, _aten.unsqueeze.default, mask, 2),
                         [-1, -1, group_size, -1, -1])
    return _call(graph, _aten.flatten.using_ints, per_head, 2, 3)


def _call(graph: torch.fx.Graph, target, *args, **kwargs) -> torch.fx.Node:
    """A node with its fake value (what the graph reader and later passes read), computed in the graph's mode."""
    node = graph.call_function(target, args, kwargs)
    values = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["val"])
    with mode_of(values):
        node.meta["val"] = target(*values[0], **values[1])
    return node


def _erase_unused_chain(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """repeat_kv's reshape (and its clone), expand and unsqueeze, once nothing reads them."""
    for _ in range(4):
        if node.users or node.op != "call_function":
            return
        source = node.args[0]
        graph.erase_node(node)
        node = source


def _is_one(size) -> bool:
    """A size that is 1 whatever the inputs (a symbolic size is not: it is asked of no shape environment)."""
    return isinstance(size, int) and size == 1


def _is_call(node, *targets) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target in targets


def _shape(node) -> tuple:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return tuple(value.shape) if isinstance(value, torch.Tensor) else ()
