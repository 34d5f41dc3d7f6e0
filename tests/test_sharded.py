"""Sharded data parallel (aot_ops.shard): a transformers Llama trained with its parameters, gradients and AdamW state
sharded over 2 and 4 msrun CPU workers, against single-process training of the same port on the whole batch
(tests/sharded_cases.py); LoRA on a sharded base; a failing rank. The layout itself (flat shards and back) and the
refusals are checked in this process, without a job."""
from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest
import torch

from support import REPO
from test_collectives import NODE_TIMEOUT, _logs
from test_data_parallel import free_port

CASES = REPO / "tests" / "sharded_cases.py"


def _msrun(out: Path, workers: int, *args: str, env_extra: dict | None = None):
    import os
    import subprocess
    import sys

    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", **(env_extra or {}))
    return subprocess.run(  # msrun runs `python`; workers write rank_<n>/ in the working folder
        [str(bin_dir / "msrun"), f"--worker_num={workers}", f"--local_worker_num={workers}",
         f"--master_port={free_port()}", f"--log_dir={out / 'logs'}", "--join=True", str(CASES), "--out", str(out),
         *args], env=env, capture_output=True, text=True, timeout=900, cwd=out)


def _job(out: Path, workers: int, *args: str) -> list[dict]:
    launched = _msrun(out, workers, *args)
    assert launched.returncode == 0, _logs(out)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(workers)]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> list[dict]:
    return _job(tmp_path_factory.mktemp("sharded2"), 2, "--lora")


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> list[dict]:
    return _job(tmp_path_factory.mktemp("sharded4"), 4)


def _check_training(result: dict, size: int) -> None:
    """Losses and every parameter against single-process training on the whole batch (the ranks' mean loss; the
    state_dict gathered from the shards and loaded by the whole model)."""
    run = result
    assert abs(run["losses"][0][1] - run["torch_loss"]) <= 1e-5 * run["torch_loss"]  # the port's forward: torch's
    for sharded, single in run["losses"]:
        assert abs(sharded - single) <= 1e-5 * abs(single), run["losses"]
    assert run["keys_equal"]
    for key, (largest, norm) in run["errors"].items():
        # AdamW divides each gradient by its own running magnitude: an element whose gradient is near zero moves by
        # up to the learning rate on a rounding difference of its gradient (single-process training of the same
        # port differs from torch's by as much: docs/distributed.md); the tensor as a whole stays within 1e-5
        assert norm <= 1e-5, (key, norm)
        assert largest <= 1e-4, (key, largest)


@pytest.mark.slow
@pytest.mark.parametrize("size", [2, 4])
def test_a_sharded_llama_trains_as_single_process_training_on_the_whole_batch(size, request):
    """5 AdamW steps of a 4-layer float32 Llama sharded over `size` ranks, each rank its own part of the batch: the
    ranks' mean loss each step, and every parameter after training, as the unsharded port trained on the whole
    batch; each rank holds 1/N of the parameters (padding aside), as flat shards, which its checkpoint holds."""
    ranks = request.getfixturevalue("two_ranks" if size == 2 else "four_ranks")
    for rank, result in enumerate(ranks):
        assert (result["rank"], result["size"]) == (rank, size)
        run = result["llama"]
        _check_training(run, size)
        assert run["whole_numel"] / size <= run["shard_numel"] <= run["whole_numel"] / size + run["units"] * size
        assert run["shard_keys"] == sorted(["flat_shard", "model.model.embed_tokens.flat_shard",
                                            "model.lm_head.flat_shard"]
                                           + [f"model.model.layers.{k}.flat_shard" for k in range(4)])


@pytest.mark.slow
@pytest.mark.parametrize("size", [2, 4])
def test_each_unit_is_gathered_once_forward_and_once_backward_and_reduce_scattered_once(size, request):
    """The collectives of each training step: an all-gather of every unit (the 4 layers, the embedding, the LM
    head and the model's own final norm) in the forward, another in the backward (the gathered weights are not
    kept for it), one reduce-scatter of each unit's gradient; each unit's gathers inside the piece that alone
    reads them."""
    ranks = request.getfixturevalue("two_ranks" if size == 2 else "four_ranks")
    for result in ranks:
        run = result["llama"]
        assert run["units"] == 7
        assert run["collectives"] == [{"all_gather": 2 * 7, "reduce_scatter": 7}] * 5
        assert run["gathered_pieces"] == 7


@pytest.mark.slow
def test_lora_on_a_sharded_base_trains_as_the_whole_peft_model(two_ranks):
    """peft's LoRA on every projection of a 2-layer Llama, then sharded: the frozen base and the adapters each a
    flat shard per unit; 5 AdamW steps of the adapters as single-process training of the same peft model. Each
    step gathers the 7 flat shards (2 per layer, the embedding, the LM head, the norm) once forward and again
    backward where the piece reading them has a backward (the layers' 4 and the LM head's: the embedding and the
    norm's first piece differentiate nothing), and reduce-scatters the adapters' 2 alone (no frozen gradient)."""
    for result in two_ranks:
        run = result["lora"]
        _check_training(run, 2)
        assert run["collectives"] == [{"all_gather": 7 + 5, "reduce_scatter": 2}] * 5
        assert "model.base_model.model.model.layers.0.frozen_flat_shard" in run["shard_keys"]
        assert "model.base_model.model.model.layers.0.flat_shard" in run["shard_keys"]


@pytest.mark.slow
def test_a_sharded_cell_trains_in_graph_mode(two_ranks):
    """GRAPH_MODE compiles the step, the GatheredPieces' construct and bprop from their generated source: 3 AdamW
    steps of a 2-layer Llama give the unsharded port's losses."""
    for result in two_ranks:
        for sharded, single in result["graph_mode"]:
            assert abs(sharded - single) <= 1e-5 * abs(single), result["graph_mode"]


@pytest.mark.slow
def test_a_failing_rank_ends_the_sharded_job_with_its_error(tmp_path):
    """The last rank raises in its third all-gather; the other waits in a gather until MindSpore's scheduler
    ends the job: a named error, within a bounded time, no hang."""
    start = time.monotonic()
    launched = _msrun(tmp_path, 2, "--failing-rank", env_extra={"MS_NODE_TIMEOUT": str(NODE_TIMEOUT)})
    elapsed = time.monotonic() - start
    assert launched.returncode != 0
    assert "rank failing on purpose" in (tmp_path / "logs" / "worker_1.log").read_text(errors="replace")
    assert not (tmp_path / "finished0").exists()
    assert elapsed < 150, elapsed


# ---- the layout, in this process ------------------------------------------------------------------------------

def _llama(tied: bool = False):
    import transformers

    config = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


@pytest.mark.parametrize("tied", [False, True])
def test_the_ranks_flat_shards_put_together_give_the_models_state_dict(tied):
    """Each rank's flat shards (one a unit, float32 masters of a bfloat16 model), joined in rank order and cut
    back (sharded.unflattened), give the model's state_dict: every key, shape, dtype and value; a tied embedding
    and LM head one tensor under both keys."""
    from aot_ops._port.sharded import FROZEN, TRAINABLE, flat_shards, shard_over, unflattened

    whole = _llama(tied).to(torch.bfloat16)
    expected = whole.state_dict()
    ranks = [shard_over(copy.deepcopy(whole), rank, 3) for rank in range(3)]
    states = [m.state_dict() for m in ranks]
    flats = flat_shards(ranks[0])
    embeddings = [] if tied else [f"model.embed_tokens.{TRAINABLE}", f"lm_head.{TRAINABLE}"]  # units of their own
    assert sorted(flats) == sorted([TRAINABLE] + [f"model.layers.{k}.{TRAINABLE}" for k in range(3)] + embeddings)
    assert all(states[0][key].dtype == torch.float32 for key in flats)
    joined = {key: torch.cat([s[key] for s in states]) for key in flats}
    rebuilt = unflattened(states[0], flats, joined)
    assert sorted(rebuilt) == sorted(expected)
    for key, value in expected.items():
        assert rebuilt[key].dtype == value.dtype and torch.equal(rebuilt[key], value), key
    if tied:
        assert rebuilt["lm_head.weight"] is rebuilt["model.embed_tokens.weight"]
    whole.requires_grad_(False)  # a frozen unit's shard is the frozen one
    frozen = shard_over(copy.deepcopy(whole), 0, 2)
    assert FROZEN in dict(frozen.named_parameters()) and TRAINABLE not in dict(frozen.named_parameters())


def test_what_sharding_refuses_is_named():
    """A parameter shared by two units, a unit pattern matching nothing, a model sharded twice: PortErrors naming
    the parameter, the pattern or the model."""
    from aot_ops._port.errors import PortError
    from aot_ops._port.sharded import shard_over

    model = _llama()
    model.model.layers[1].mlp.up_proj.weight = model.model.layers[0].mlp.up_proj.weight
    with pytest.raises(PortError, match=r"layers\.1\.mlp\.up_proj\.weight is the same tensor as a parameter of "
                                        r"'model\.layers\.0'"):
        shard_over(model, 0, 2)
    with pytest.raises(PortError, match=r"no module matches the units \['decoder\.\*'\]"):
        shard_over(_llama(), 0, 2, units=["decoder.*"])
    twice = shard_over(_llama(), 0, 2)
    with pytest.raises(PortError, match="sharded already"):
        shard_over(twice, 0, 2)
