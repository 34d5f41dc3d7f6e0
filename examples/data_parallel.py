"""Data-parallel training of a ported PyTorch network with MindSpore's own launcher (CPU workers).

    PATH="$PWD/.venv/bin:$PATH" .venv/bin/msrun --worker_num=2 --local_worker_num=2 --master_port=8129 \
        --log_dir=/tmp/dp_logs --join=True examples/data_parallel.py --out /tmp/dp
    .venv/bin/python examples/data_parallel.py --single --out /tmp/dp      # the same steps in one process

msrun starts each worker with the `python` found on PATH, hence the PATH prefix (the project's environment).
Every worker ports the same torch network (same seed, same weights), trains on its shard of each global batch,
and averages gradients across workers with nn.DistributedGradReducer before the SGD step; `--single` trains on
the whole global batch in one process. Each run writes the final weights (torch state_dict, one file per rank)
and prints the losses, so both ranks can be compared with each other and with single-process training.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import mindspore as ms
import torch
from mindspore import nn as msnn
from torch import nn

import aot_ops
from aot_ops._core.convert import to_ms

STEPS = 5
GLOBAL_BATCH = 8
LEARNING_RATE = 0.1


class Classifier(nn.Module):
    """A small CNN with a loss. GroupNorm rather than BatchNorm: its statistics are per sample, so training on
    shards with averaged gradients is exactly training on the whole batch (BatchNorm would see per-shard
    statistics)."""

    def __init__(self, classes=4):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8), nn.ReLU(),
                                      nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(8 * 4 * 4, classes)

    def forward(self, x, target):
        logits = self.head(torch.flatten(self.features(x), 1))
        return nn.functional.cross_entropy(logits, target)


def global_batches():
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(GLOBAL_BATCH, 3, 8, 8, generator=gen), torch.randint(0, 4, (GLOBAL_BATCH,), generator=gen))
            for _ in range(STEPS)]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder for the final weights (rank<k>.pt)")
    parser.add_argument("--single", action="store_true", help="train in one process on the whole global batch")
    parser.add_argument("--graph", action="store_true", help="GRAPH_MODE (default: PyNative)")
    options = parser.parse_args(argv)
    ms.set_device("CPU")
    ms.set_context(mode=ms.GRAPH_MODE if options.graph else ms.PYNATIVE_MODE)
    if options.single:
        rank, size = 0, 1
    else:
        from mindspore.communication import get_group_size, get_rank, init

        init()
        rank, size = get_rank(), get_group_size()
        ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)

    torch.manual_seed(42)  # every worker builds the same network
    shard = GLOBAL_BATCH // size
    data = [(x[rank * shard:(rank + 1) * shard], t[rank * shard:(rank + 1) * shard]) for x, t in global_batches()]
    cell = aot_ops.from_torch(Classifier(), data[0])
    optimizer = msnn.SGD(cell.trainable_params(), learning_rate=LEARNING_RATE)
    step = ms.value_and_grad(cell, None, optimizer.parameters)
    reducer = msnn.DistributedGradReducer(optimizer.parameters, mean=True) if size > 1 else None
    for k, (x, target) in enumerate(data):
        loss, grads = step(to_ms(x), to_ms(target))
        if reducer is not None:
            grads = reducer(grads)  # the mean over workers: the gradient of the whole global batch
        optimizer(grads)
        print(f"rank {rank}/{size} step {k}: loss {float(loss.asnumpy()):.6f}", flush=True)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    name = "single.pt" if options.single else f"rank{rank}.pt"
    torch.save(cell.torch_state_dict(), out / name)
    print(f"rank {rank}: weights written to {out / name}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
