"""torch's functional collectives in a ported module, run by MindSpore's communication under msrun (2 CPU workers):
one job checks the collectives bridged on each rank against torch's own run of the module under torchrun (gloo),
and a transformers Llama split by its plan against the whole model; a second job, a rank failing while the other
waits in a collective."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import REPO
from test_data_parallel import free_port

pytestmark = pytest.mark.slow  # two workers under msrun

CASES = REPO / "tests" / "collective_cases.py"
# MindSpore's scheduler ends a job this many seconds after a rank stops answering (its default: 30); msrun itself
# kills the other ranks within a second of one exiting with an error (--join=True)
NODE_TIMEOUT = 10


def _msrun(out: Path, *args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", **(env_extra or {}))
    return subprocess.run(  # msrun runs `python`; workers write rank_<n>/ in the working folder
        [str(bin_dir / "msrun"), "--worker_num=2", "--local_worker_num=2", f"--master_port={free_port()}",
         f"--log_dir={out / 'logs'}", "--join=True", str(CASES), "--out", str(out), *args],
        env=env, capture_output=True, text=True, timeout=600, cwd=out)


def _logs(out: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-3000:] for p in sorted((out / "logs").glob("worker_*.log")))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    """A tied Llama (4 layers) saved in two shards (read by the ranks, split), and a copy of its folder missing one shard."""
    out = tmp_path_factory.mktemp("collectives")
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=4096, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(out / "checkpoint", max_shard_size="10MB")
    shards = sorted((out / "checkpoint").glob("*.safetensors"))
    assert len(shards) == 2
    (out / "missing_shard").mkdir()
    for file in (out / "checkpoint").iterdir():
        if file != shards[-1]:
            (out / "missing_shard" / file.name).symlink_to(file)
    return out


@pytest.fixture(scope="module")
def ranks(checkpoints) -> list[dict]:
    out = checkpoints
    torchrun = subprocess.run(  # torch's own run of the module, with gloo: the reference of each rank
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", f"--master-port={free_port()}",
         str(CASES), "--torchrun", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert torchrun.returncode == 0, torchrun.stderr[-3000:]
    launched = _msrun(out)
    assert launched.returncode == 0, _logs(out)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_torch_functional_collectives_give_torchruns_outputs_and_gradients_on_every_rank(ranks):
    """all_reduce (sum, avg), all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single and broadcast, each
    MindSpore's operator on the job's group (reduce-scatter and all-to-all made of AllReduce and AllGather on the
    CPU): a column- then row-parallel MLP's outputs and the gradients of a loss over all of them (the input's and
    every parameter's) equal torch's under torchrun with gloo, rank by rank, in PyNative and GRAPH_MODE; ported per
    node, fused (a program before the collectives, one after the first, which adds the bias) and compiled (those
    programs compiled by AOTInductor, none falling back)."""
    for rank, result in enumerate(ranks):
        assert (result["rank"], result["size"]) == (rank, 2)
        for port in ("fused_", "compiled_"):
            assert "as 2 programs between 6 collectives" in result[f"{port}counted"], result[f"{port}counted"]
        assert result["compiled_fallbacks"] == []
        for port in ("", "fused_", "compiled_"):
            assert result[f"{port}cells"] == ["AllGatherCell", "AllReduceCell", "AllToAllCell", "BroadcastCell",
                                              "ReduceScatterCell"]
            for mode in (f"{port}pynative", f"{port}graph"):
                ours, theirs = result[f"{mode}_shapes"]
                assert ours == theirs
                assert max(result[f"{mode}_output_errors"]) < 1e-6, result[f"{mode}_output_errors"]
                gradients = result[f"{mode}_gradient_errors"]
                assert sorted(gradients) == ["bias", "down.weight", "up.bias", "up.weight", "x"]
                assert max(gradients.values()) < 1e-6, gradients
        assert max(result["bfloat16_errors"]) < 2e-2, result["bfloat16_errors"]  # bfloat16's rounding


def test_max_min_and_product_all_reduces_run_and_refuse_a_gradient_as_torch_does(ranks):
    """MindSpore 2.10's CPU AllReduce sums whatever reduction it is given: the port gathers and reduces instead;
    torch has no gradient for these reductions, and neither has the port (its error names the node)."""
    for result in ranks:
        assert "all_reduce backward only supports 'sum' and 'avg' reductions, got 'max'" in result["torch_no_gradient"]
        for mode in ("pynative", "graph"):
            assert max(result[f"{mode}_reduction_errors"]) < 1e-6, result[f"{mode}_reduction_errors"]
            assert "all_reduce backward only supports 'sum' and 'avg' reductions, got 'max'" in \
                result[f"{mode}_no_gradient"], result[f"{mode}_no_gradient"]


def test_what_the_port_cannot_run_across_ranks_is_refused_by_name(ranks):
    """Uneven all-to-all splits, a collective inside a torch.autograd.Function (which runs in torch, whose process
    group only traces: it would not communicate)."""
    for result in ranks:
        assert "only equal splits" in result["uneven"] and "[3, 1]" in result["uneven"], result["uneven"]
        assert "_SummedInTorch" in result["in_function"] and "calls torch's all_reduce in its forward" in \
            result["in_function"], result["in_function"]


def test_a_rank_count_not_the_jobs_and_a_checkpoint_missing_a_shard_are_named(ranks):
    for result in ranks:
        assert "size=4, but this MindSpore job has 2 ranks" in result["wrong_size"], result["wrong_size"]
        assert "is listed by the index but missing" in result["missing_shard"], result["missing_shard"]


def test_a_rank_that_fails_ends_the_job_without_leaving_the_other_waiting(checkpoints, tmp_path):
    """Rank 1 fails loading (a shard missing) while rank 0 waits in the ported MLP's all-reduce: msrun (--join)
    kills rank 0 within a second of rank 1's exit and the job ends, within MindSpore's node timeout, with an error
    whose log names the cause."""
    (tmp_path / "missing_shard").symlink_to(checkpoints / "missing_shard")
    start = time.monotonic()
    launched = _msrun(tmp_path, "--failing-rank", env_extra={"MS_NODE_TIMEOUT": str(NODE_TIMEOUT)})
    elapsed = time.monotonic() - start
    assert launched.returncode != 0
    assert "is listed by the index but missing" in (tmp_path / "logs" / "worker_1.log").read_text(errors="replace")
    # (whether rank 0 is killed inside its all-reduce or, once seen in nine runs, its collectives return and msrun
    # ends it after: docs/distributed.md)
    assert elapsed < 120, elapsed  # start-up (~15 s), the failure, the node timeout


def test_a_transformers_llama_split_by_its_own_plan_gives_the_whole_models_logits_on_every_rank(ranks):
    """aot_ops.tensor_parallel: the attention and MLP split by the model's plan (4 layers), the embedding and the LM
    head by vocabulary; per layer two all-reduces (the output and down projections) as the plan says, one for the
    embedding, one all-gather of the logits; each column-parallel layer's input a copy (communicating in the
    backward only)."""
    for result in ranks:
        assert result["llama_error"] < 1e-5, result["llama_error"]
        talking = [k for k in result["llama_collectives"] if k != "copy"]
        assert talking == ["reduce"] * (2 * 4 + 1) + ["gather"], result["llama_collectives"]
        assert result["llama_collectives"].count("copy") == 4 * 5 + 1  # q, k, v, gate, up a layer; the LM head
        assert result["llama_parameters"] < 0.51 * result["llama_whole_parameters"]  # norms replicated


def test_a_model_split_by_a_users_plan_gives_its_slices_gradients_in_graph_mode(ranks):
    for result in ranks:
        ours, theirs = result["graph_split_mlp_loss"]
        assert abs(ours - theirs) <= 1e-5 * abs(theirs)
        errors = result["graph_split_mlp_errors"]
        assert sorted(errors) == ["model.0.bias", "model.0.weight", "model.2.bias", "model.2.weight", "x"]
        assert max(errors.values()) < 1e-5, errors


def test_the_split_llama_trains_as_the_whole_model_in_torch(ranks):
    """Three SGD steps on every rank, fused (programs between the collectives, each with its backward program):
    the losses of the whole model trained in torch, and after the first step each rank's gradient of each parameter
    equal to its slice of the whole model's (the replicated norms' whole); after them, the gathered state_dict is
    the whole model's trained in torch."""
    for result in ranks:
        # 2 reduces and 5 copies a layer, the embedding's reduce, the LM head's copy and gather
        assert "between 31 collectives" in result["llama_fused_counted"], result["llama_fused_counted"]
        for ours, theirs in result["llama_losses"]:
            assert abs(ours - theirs) <= 1e-5 * abs(theirs), result["llama_losses"]
        errors = result["llama_gradient_errors"]
        assert len(errors) == 4 * 9 + 3 and max(errors.values()) < 1e-4, errors
        # torch_state_dict() gathers the trained shards: the whole model trained in torch, loaded by torch
        assert result["llama_gathered_error"] < 1e-5, result["llama_gathered_error"]
        assert 0.5 < result["llama_shard_fraction"] < 0.51  # gather=False: the rank's shard (norms whole)


def test_lora_on_the_split_llama_trains_as_the_whole_peft_model_in_torch(ranks):
    """peft's LoRA on all seven projections of a 2-layer Llama, then split by the model's plan: each adapter split to
    meet its base layer (a column-parallel base's B split by output features, a row-parallel base's A by input
    features, its r-wide product summed over the ranks). Three fused SGD steps of the adapters: torch's losses, every
    adapter's gradient its slice of the whole peft model's, and the gathered state_dict the whole peft model's."""
    for result in ranks:
        talking = [k for k in result["lora_collectives"] if k != "copy"]
        # a layer: the output and down projections' reduces and their adapters' A; the embedding; the logits
        assert talking == ["reduce"] * (4 * 2 + 1) + ["gather"], result["lora_collectives"]
        # a layer: q, k, v, gate, up and their adapters' B; the LM head
        assert result["lora_collectives"].count("copy") == 10 * 2 + 1
        for ours, theirs in result["lora_losses"]:
            assert abs(ours - theirs) <= 1e-5 * abs(theirs), result["lora_losses"]
        errors = result["lora_gradient_errors"]
        assert len(errors) == 2 * 7 * 2 and max(errors.values()) < 1e-4, errors
        assert result["lora_gathered_error"] < 1e-5, result["lora_gathered_error"]


def test_the_split_llama_generates_torchs_tokens_with_its_share_of_the_key_value_cache(ranks):
    """from_torch_lm (fused) + generate on the split model: each rank's cache holds its key/value head (1 of 2),
    written in place by the programs, the greedy tokens are the whole model's in torch on both ranks."""
    for result in ranks:
        # batch, key/value heads, positions (max_length and from_torch_lm's own), head size
        assert [[b, heads, size] for b, heads, _, size in result["llama_cache_shapes"]] == [[2, 1, 16]]
        assert result["llama_generated"] == result["llama_torch_generated"]
        # fused without a backward: each piece writes its layer's cache in place, nothing is assigned
        assert result["llama_cache_assigned"] == 0


def test_each_rank_reads_its_share_of_a_checkpoint_and_generates_torchs_tokens(ranks):
    """load_pretrained / from_pretrained with tensor_parallel=True: the model split on the meta device, then only
    each rank's share of every split tensor read (rows, or columns row by row; the tied embedding's rows once, the
    embedding and the LM head still tied), the norms whole; from_pretrained's port generates the whole model's
    tokens."""
    for result in ranks:
        # its share, and no more than the headers and config.json besides
        # (two shards: two headers)
        assert result["checkpoint_share"] <= result["checkpoint_read"] <= result["checkpoint_share"] + (128 << 10)
        assert result["checkpoint_share"] <= result["checkpoint_bytes"] / 2 + result["checkpoint_replicated"]
        assert result["checkpoint_generated"] == result["checkpoint_torch_generated"]
        # from_pretrained exports two of the 4 layers and writes the others into the graph: their collectives too
        assert result["checkpoint_collectives"] == ["reduce"] * (2 * 4 + 1) + ["gather"]
