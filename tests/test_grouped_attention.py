"""Grouped-query attention in a graph that is never differentiated attends per key/value head
(aot_ops/_port/trace/grouped_attention.py) instead of copying the keys and values once per query head: the same
results as torch, the repeat gone from the port where the rewrite is exact, kept where it is not."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import repeat_kv

import aot_ops
from support import to_ms, to_torch

HEADS, KV_HEADS, DIM = 8, 2, 16


class GroupedAttention(torch.nn.Module):
    """transformers' traced path: repeat_kv, then one attention over all query heads."""

    def __init__(self, mask_heads: int | None, causal: bool = False, no_grad_region: bool = False):
        super().__init__()
        self.mask_heads, self.causal, self.no_grad_region = mask_heads, causal, no_grad_region

    def forward(self, query, key, value):
        if self.no_grad_region:  # exported through torch's functionalisation: repeat_kv's reshape a clone and a view
            with torch.no_grad():
                return self.attend(query, key, value)
        return self.attend(query, key, value)

    def attend(self, query, key, value):
        key = repeat_kv(key, HEADS // KV_HEADS)
        value = repeat_kv(value, HEADS // KV_HEADS)
        if self.mask_heads is None:
            return F.scaled_dot_product_attention(query, key, value, is_causal=self.causal)
        rows, keys = query.shape[2], key.shape[2]
        positions = torch.arange(keys)
        # each row sees the keys up to its own position from the end (a left-aligned causal pattern), the mask
        # differing per head where it has heads, boolean when shared, additive when per head
        visible = positions[None, :] <= positions[-rows:, None]
        if self.mask_heads == 1:
            return F.scaled_dot_product_attention(query, key, value, attn_mask=visible[None, None], scale=0.3)
        bias = torch.arange(HEADS, dtype=query.dtype)[:, None, None] * 0.01 * positions
        mask = torch.where(visible, bias, torch.finfo(query.dtype).min)[None]
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask)


def _inputs(rows: int, keys: int):
    generator = torch.Generator().manual_seed(rows * 100 + keys)
    return (torch.randn(2, HEADS, rows, DIM, generator=generator),
            torch.randn(2, KV_HEADS, keys, DIM, generator=generator),
            torch.randn(2, KV_HEADS, keys, DIM, generator=generator))


def _port(module, fuse):
    rows, keys = torch.export.Dim("rows", min=1, max=32), torch.export.Dim("keys", min=2, max=64)
    return aot_ops.from_torch(module, _inputs(3, 9), dynamic_shapes=({2: rows}, {2: keys}, {2: keys}),
                              evaluation_only=True, fuse=fuse)


@pytest.mark.parametrize("fuse", [False, True], ids=["per-node", "fused"])
@pytest.mark.parametrize("mask_heads,no_grad_region", [(1, False), (HEADS, False), (None, False), (1, True)],
                         ids=["shared-mask", "per-head-mask", "no-mask", "shared-mask-functionalised"])
def test_grouped_attention_matches_torch_without_the_repeat(mask_heads, no_grad_region, fuse):
    module = GroupedAttention(mask_heads, no_grad_region=no_grad_region)
    cell = _port(module, fuse)
    if not fuse:  # the per-node source shows each operator: the keys and values are no longer expanded
        source = open(cell.source_file).read()
        assert source.count("aten::scaled_dot_product_attention") == 1
        assert source.count("aten::expand") == (1 if mask_heads == 1 else 0)  # the shared mask's rows only
        assert "aten::clone" not in source and "aten::_unsafe_view" not in source
    for rows, keys in ((1, 9), (3, 9), (1, 40), (5, 17)):
        inputs = _inputs(rows, keys)
        expected = module(*inputs)
        got = to_torch(cell(*(to_ms(t) for t in inputs)))
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_causal_attention_keeps_the_repeat():
    """is_causal orders the rows by position: grouping a head's rows would change which keys they see."""
    module = GroupedAttention(None, causal=True)
    cell = _port(module, False)
    assert open(cell.source_file).read().count("aten::expand") == 2
    inputs = _inputs(5, 5)
    torch.testing.assert_close(to_torch(cell(*(to_ms(t) for t in inputs))), module(*inputs), rtol=1e-5, atol=1e-5)


def test_a_trained_port_keeps_the_repeat():
    """A graph that is differentiated keeps torch's repeat, so its gradients follow torch's own."""
    module = GroupedAttention(1)
    cell = aot_ops.from_torch(module, _inputs(3, 9))
    source = open(cell.source_file).read()
    assert source.count("aten::expand") == 2 and "aten::flatten" not in source  # the keys and values repeated


def test_half_precision_keeps_the_repeat():
    """Grouping rounds bfloat16 products differently (greedy tokens part from torch's at near ties): kept as torch
    traces it, and equal to torch's."""
    module = GroupedAttention(None)
    inputs = tuple(t.to(torch.bfloat16) for t in _inputs(3, 9))
    cell = aot_ops.from_torch(module, inputs, evaluation_only=True)
    assert open(cell.source_file).read().count("aten::expand") == 2
    assert torch.equal(to_torch(cell(*(to_ms(t) for t in inputs))), module(*inputs))


class PaddingMaskAttention(torch.nn.Module):
    """A mask with one row for every query row (padding: the keys each sequence has), shared by the heads or per
    head: the shared one serves the grouped rows as it is; a per-head one would need repeating per row."""

    def __init__(self, per_head: bool):
        super().__init__()
        self.per_head = per_head

    def forward(self, query, key, value):
        key, value = repeat_kv(key, HEADS // KV_HEADS), repeat_kv(value, HEADS // KV_HEADS)
        keys = torch.arange(key.shape[2])
        padded = keys[None, :] >= torch.tensor([[key.shape[2] - 2], [key.shape[2]]])  # sequence 0: 2 padding keys
        mask = torch.where(padded, torch.finfo(query.dtype).min, 0.0)[:, None, None, :]
        if self.per_head:
            mask = mask + torch.arange(HEADS, dtype=query.dtype)[None, :, None, None] * 0.01
        return F.scaled_dot_product_attention(query, key, value, attn_mask=mask)


@pytest.mark.parametrize("per_head", [False, True], ids=["shared", "per-head"])
def test_a_mask_with_one_row_for_all_rows(per_head):
    module = PaddingMaskAttention(per_head)
    cell = _port(module, False)
    source = open(cell.source_file).read()
    assert source.count("aten::expand") == (2 if per_head else 0)  # per head: kept as traced
    for rows, keys in ((1, 9), (3, 9), (5, 17)):
        inputs = _inputs(rows, keys)
        torch.testing.assert_close(to_torch(cell(*(to_ms(t) for t in inputs))), module(*inputs), rtol=1e-5,
                                   atol=1e-5)
