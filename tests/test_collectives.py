"""torch's functional collectives in a ported module, run by MindSpore's communication under msrun (2 CPU workers):
one job checks the collectives bridged, each rank against the same network unsharded in torch."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO
from test_data_parallel import free_port

pytestmark = pytest.mark.slow  # two workers under msrun

CASES = REPO / "tests" / "collective_cases.py"


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("collectives")
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(out / "checkpoint")  # read by the ranks, split
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")  # msrun runs `python`
    launched = subprocess.run(
        [str(bin_dir / "msrun"), "--worker_num=2", "--local_worker_num=2", f"--master_port={free_port()}",
         f"--log_dir={out / 'logs'}", "--join=True", str(CASES), "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=600, cwd=out)  # workers write rank_<n>/ here
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted((out / "logs").glob("worker_*.log")))
    assert launched.returncode == 0, logs
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_a_tensor_parallel_mlp_with_torch_collectives_gives_the_unsharded_result_on_every_rank(ranks):
    """all_reduce (sum, avg, max), all_gather_into_tensor and broadcast, each a MindSpore operator on the job's
    group: a column- then row-parallel MLP sums to the whole MLP's output on each rank."""
    for rank, result in enumerate(ranks):
        assert (result["rank"], result["size"]) == (rank, 2)
        assert result["shapes"] == result["expected_shapes"]
        assert max(result["errors"]) < 1e-5, result["errors"]  # PyNative
        assert max(result["graph_errors"]) < 1e-5, result["graph_errors"]  # GRAPH_MODE


def test_a_fused_port_of_a_collective_and_a_collective_not_bridged_are_refused_by_name(ranks):
    for result in ranks:
        assert "all_reduce" in result["fused"] and "fuse=False" in result["fused"], result["fused"]
        assert "the collective reduce_scatter_tensor is not bridged" in result["reduce_scatter"], \
            result["reduce_scatter"]


def test_a_gradient_through_a_collective_is_refused_by_name(ranks):
    for result in ranks:
        assert "gradient through torch's all_reduce is not bridged" in result["gradient"], result["gradient"]


def test_a_transformers_llama_split_by_its_own_plan_gives_the_whole_models_logits_on_every_rank(ranks):
    """aot_ops.tensor_parallel: the attention and MLP split by the model's plan, the embedding and the LM head by
    vocabulary; per layer two all-reduces (the output and down projections) as the plan says, one for the
    embedding, one all-gather of the logits; each column-parallel layer's input a copy (communicating in the
    backward only)."""
    for result in ranks:
        assert result["llama_error"] < 1e-5, result["llama_error"]
        talking = [k for k in result["llama_collectives"] if k != "copy"]
        assert talking == ["reduce"] * 5 + ["gather"], result["llama_collectives"]
        assert result["llama_collectives"].count("copy") == 2 * 5 + 1  # q, k, v, gate, up a layer; the LM head
        assert result["llama_parameters"] < 0.51 * result["llama_whole_parameters"]  # norms replicated


def test_the_split_llama_trains_as_the_whole_model_in_torch(ranks):
    """Three SGD steps on every rank: the losses of the whole model trained in torch, and after the first step
    each rank's gradient of each parameter equal to its slice of the whole model's (the replicated norms' whole)."""
    for result in ranks:
        for ours, theirs in result["llama_losses"]:
            assert abs(ours - theirs) <= 1e-5 * abs(theirs), result["llama_losses"]
        errors = result["llama_gradient_errors"]
        assert len(errors) == 2 * 9 + 3 and max(errors.values()) < 1e-4, errors


def test_the_split_llama_generates_torchs_tokens_with_its_share_of_the_key_value_cache(ranks):
    """from_torch_lm + generate on the split model: each rank's cache holds its key/value head (1 of 2), the
    greedy tokens are the whole model's in torch on both ranks."""
    for result in ranks:
        # batch, key/value heads, positions (max_length and from_torch_lm's own), head size
        assert [[b, heads, size] for b, heads, _, size in result["llama_cache_shapes"]] == [[2, 1, 16]]
        assert result["llama_generated"] == result["llama_torch_generated"]


def test_each_rank_reads_its_share_of_a_checkpoint_and_generates_torchs_tokens(ranks):
    """load_pretrained / from_pretrained with tensor_parallel=True: the model split on the meta device, then only
    each rank's share of every split tensor read (rows, or columns row by row; the tied embedding's rows once, the
    embedding and the LM head still tied), the norms whole; from_pretrained's port generates the whole model's
    tokens."""
    for result in ranks:
        # its share, and no more than the headers and config.json besides
        assert result["checkpoint_share"] <= result["checkpoint_read"] <= result["checkpoint_share"] + (128 << 10)
        assert result["checkpoint_share"] <= result["checkpoint_bytes"] / 2 + result["checkpoint_replicated"]
        assert result["checkpoint_generated"] == result["checkpoint_torch_generated"]
