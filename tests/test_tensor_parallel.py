"""aot_ops.tensor_parallel's split of a transformers model by its own plan, checked in one process: each rank's
slices put together are the whole layer, and what cannot split is named. The split model's results under msrun:
tests/test_collectives.py."""
from __future__ import annotations

import copy

import pytest
import torch

from aot_ops import PortError
from aot_ops._port.tensor_parallel import (ColumnParallelGathered, RowParallelLinear, VocabParallelEmbedding,
                                           shard_by_plan)

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def llama():
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def test_each_ranks_slices_put_together_are_the_whole_layers(llama):
    ranks = [shard_by_plan(copy.deepcopy(llama), rank, 2) for rank in range(2)]
    whole = dict(llama.named_parameters())
    attention = [r.model.layers[1].self_attn for r in ranks]
    mlp = [r.model.layers[1].mlp for r in ranks]
    assert isinstance(attention[0].o_proj, RowParallelLinear) and isinstance(mlp[0].down_proj, RowParallelLinear)
    assert isinstance(ranks[0].lm_head, ColumnParallelGathered)
    assert isinstance(ranks[0].model.embed_tokens, VocabParallelEmbedding)
    assert [r.model.embed_tokens.start for r in ranks] == [0, 48]
    joined = {  # colwise and embedding rows: output features; rowwise: input features
        "model.layers.1.self_attn.k_proj.weight": torch.cat([a.k_proj.weight for a in attention]),
        "model.layers.1.mlp.up_proj.weight": torch.cat([m.up_proj.weight for m in mlp]),
        "model.layers.1.self_attn.o_proj.weight": torch.cat([a.o_proj.weight for a in attention], 1),
        "model.layers.1.mlp.down_proj.weight": torch.cat([m.down_proj.weight for m in mlp], 1),
        "lm_head.weight": torch.cat([r.lm_head.weight for r in ranks]),
        "model.embed_tokens.weight": torch.cat([r.model.embed_tokens.weight for r in ranks]),
    }
    for name, value in joined.items():
        assert torch.equal(value, whole[name]), name
    assert attention[0].k_proj.weight.shape == (16, 64)  # one of the two key/value heads
    assert torch.equal(ranks[1].model.norm.weight, llama.model.norm.weight)  # replicated
    assert set(dict(ranks[0].named_parameters())) == set(whole)  # the state_dict's names kept


@pytest.mark.parametrize("size, plan, message", [
    (3, None, "4 attention heads and 2 key/value heads do not split over 3 ranks"),
    (4, None, "4 attention heads and 2 key/value heads do not split over 4 ranks"),
    (2, {"lm_head": "sequence_parallel"}, "'lm_head' is 'sequence_parallel'; the styles bridged are"),
    (2, {"model.layers.*.attn.q_proj": "colwise"}, "no module of LlamaForCausalLM matches"),
    (2, {"model.norm": "colwise"}, "model.norm is a LlamaRMSNorm, which 'colwise' cannot split"),
], ids=["heads", "key_value_heads", "style", "no_match", "not_linear"])
def test_what_cannot_split_is_named(llama, size, plan, message):
    with pytest.raises(PortError, match=message.replace("*", r"\*")):
        shard_by_plan(copy.deepcopy(llama), 0, size, plan)


def test_a_model_without_a_plan_is_named():
    with pytest.raises(PortError, match="Sequential has no tensor-parallel plan"):
        shard_by_plan(torch.nn.Sequential(torch.nn.Linear(4, 4)), 0, 2)
