"""Run by tests/test_sharded.py on each rank of an msrun job (2 or 4 CPU workers): a model sharded over the ranks by
aot_ops.shard, trained on each rank's part of a batch, against single-process torch training on the whole batch.
Results to --out/rank<r>.json; `--lora`: LoRA on a sharded base too. `--failing-rank`: the last rank fails during
its first training step."""
from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

import torch
from torch import nn

from collective_cases import LmLoss  # (this folder: msrun runs the script from it)

BATCH, LENGTH, STEPS, LR = 8, 12, 5, 1e-3


def llama(layers: int = 4):
    import transformers

    config = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager")
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config)


def batch(seed: int) -> torch.Tensor:
    return torch.randint(0, 96, (BATCH, LENGTH), generator=torch.Generator().manual_seed(seed))


def _counting():
    """Counts the all-gathers and reduce-scatters the shards' cells run (the CPU's reduce-scatter an all-reduce and
    a slice: counted once, as the reduce-scatter it stands for)."""
    from aot_ops._port.distributed import UnshardCell

    counts = {"all_gather": 0, "reduce_scatter": 0}
    gather, scatter = UnshardCell.all_gather, UnshardCell.reduce_scatter_sum

    def counted_gather(self, x):
        counts["all_gather"] += 1
        return gather(self, x)

    def counted_scatter(self, x):
        counts["reduce_scatter"] += 1
        return scatter(self, x)

    UnshardCell.all_gather, UnshardCell.reduce_scatter_sum = counted_gather, counted_scatter
    return counts


def trained(whole_loss: nn.Module, ids: torch.Tensor, rank: int, size: int, counts: dict) -> dict:
    """STEPS AdamW steps of the model sharded over the ranks (aot_ops.shard; this rank's rows of `ids`) beside
    single-process training of the same port unsharded on all of `ids`, with the same optimizer: the losses (the
    ranks' mean, the single process's) and torch's loss before training, the collectives of each step, and the
    gathered state_dict loaded by a fresh whole model against the single process's (per tensor: the largest
    difference over the largest value, and the difference's norm over the tensor's)."""
    import aot_ops

    rows = ids.shape[0] // size
    part = ids[rank * rows:(rank + 1) * rows]
    model = aot_ops.shard(copy.deepcopy(whole_loss))
    units = sum(1 for m in model.modules() if getattr(m, "_aot_ops_flats", None))  # the layers and the model
    sharded = aot_ops.from_torch(model, (part,), input_grads=False, fuse=True)
    single = aot_ops.from_torch(copy.deepcopy(whole_loss), (ids,), input_grads=False, fuse=True)
    mean = ops_mean(size)
    losses, per_step = [], []
    sharded_step, single_step = _adamw_steps(sharded), _adamw_steps(single)
    for _step in range(STEPS):
        before = dict(counts)
        loss = sharded_step(part)
        per_step.append({k: counts[k] - before[k] for k in counts})
        losses.append([mean(loss), float(single_step(ids).asnumpy())])
    state = sharded.torch_state_dict()
    fresh = copy.deepcopy(whole_loss)
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    fresh.load_state_dict(state)  # strict: every key, every whole shape
    own = sharded.torch_state_dict(gather=False)
    return {"losses": losses, "torch_loss": float(whole_loss(ids).detach()), "collectives": per_step,
            "keys_equal": sorted(state) == sorted(whole_loss.state_dict()),
            "errors": _errors(fresh.state_dict(), single.torch_state_dict()),
            "shard_keys": sorted(own), "shard_numel": sum(t.numel() for t in own.values()),
            "whole_numel": sum(p.numel() for p in whole_loss.parameters()),
            "units": units,
            "gathered_pieces": sum(line.startswith("class _Gathered")
                                   for line in Path(sharded.source_file).read_text().splitlines())}


def _adamw_steps(cell):
    """One step of MindSpore's AdamW (nn.AdamWeightDecay) of `cell` on its input per call, answering the loss."""
    import mindspore as ms

    cell.set_train(True)
    params = cell.trainable_params()
    grad_fn = ms.value_and_grad(cell, None, params)
    optimizer = ms.nn.AdamWeightDecay(params, learning_rate=LR, weight_decay=0.01)

    def step(ids):
        loss, grads = grad_fn(ms.Tensor(ids.numpy()))
        optimizer(grads)
        return loss
    return step


def _errors(ours: dict, theirs: dict) -> dict:
    """Per key [largest difference / largest value, norm of the difference / norm of the tensor]."""
    return {k: [float((v - theirs[k]).abs().max() / (theirs[k].abs().max() + 1e-12)),
                float((v - theirs[k]).norm() / (theirs[k].norm() + 1e-12))] for k, v in ours.items()}


def ops_mean(size: int):
    """The ranks' mean of a scalar (MindSpore's AllReduce), as a float."""
    import mindspore as ms
    from mindspore import ops
    from mindspore.communication import GlobalComm

    total = ops.AllReduce(ops.ReduceOp.SUM, GlobalComm.WORLD_COMM_GROUP)
    return lambda x: float(total(x.reshape((1,)).astype(ms.float32)).asnumpy()[0]) / size


def in_graph_mode(rank: int, size: int) -> list:
    """3 AdamW steps of a sharded 2-layer Llama in GRAPH_MODE (its GatheredPieces compiled from their source) beside
    the unsharded port's: each step's [ranks' mean loss, single process's loss]."""
    import mindspore as ms

    import aot_ops

    whole = LmLoss(llama(2)).train()
    ids = batch(3)
    rows = ids.shape[0] // size
    part = ids[rank * rows:(rank + 1) * rows]
    sharded = aot_ops.from_torch(aot_ops.shard(copy.deepcopy(whole)), (part,), input_grads=False, fuse=True)
    single = aot_ops.from_torch(copy.deepcopy(whole), (ids,), input_grads=False, fuse=True)
    mean = ops_mean(size)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        sharded_step, single_step = _adamw_steps(sharded), _adamw_steps(single)
        return [[mean(sharded_step(part)), float(single_step(ids).asnumpy())] for _ in range(3)]
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def lora_whole():
    import peft

    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    model = peft.get_peft_model(llama(2), peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                          target_modules=targets))
    with torch.no_grad():  # B is zeros when peft makes it: A's first gradient would be zeros too
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--failing-rank", action="store_true")
    parser.add_argument("--lora", action="store_true")
    args = parser.parse_args()

    import aot_ops

    rank, size = aot_ops.torch_process_group()
    result = {"rank": rank, "size": size}
    if args.lora:  # before the counting below, whose Python closures GRAPH_MODE cannot compile
        result["graph_mode"] = in_graph_mode(rank, size)
    counts = _counting()
    if args.failing_rank:
        failing_rank(args.out, rank, size)
        return
    result["llama"] = trained(LmLoss(llama()).train(), batch(1), rank, size, counts)
    if args.lora:
        result["lora"] = trained(LmLoss(lora_whole()).train(), batch(2), rank, size, counts)
    (args.out / f"rank{rank}.json").write_text(json.dumps(result))


def failing_rank(out: Path, rank: int, size: int) -> None:
    """The last rank raises during its first step (after its forward's first gathers), the others wait in the
    gathers that follow."""
    import mindspore as ms

    import aot_ops
    from aot_ops._port.distributed import UnshardCell

    whole = LmLoss(llama()).train()
    ids = batch(1)[:2]
    cell = aot_ops.from_torch(aot_ops.shard(whole), (ids,), input_grads=False, fuse=True)
    if rank == size - 1:
        gather = UnshardCell.all_gather
        calls = []

        def failing(self, x):
            calls.append(1)
            if len(calls) == 3:
                raise RuntimeError("rank failing on purpose in its third all-gather")
            return gather(self, x)

        UnshardCell.all_gather = failing
    loss, _ = ms.value_and_grad(cell, None, cell.trainable_params())(ms.Tensor(ids.numpy()))
    (out / f"finished{rank}").write_text(f"the step returned without the last rank: {loss}")


if __name__ == "__main__":
    main()
