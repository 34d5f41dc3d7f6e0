"""Sharded training's memory per rank: a bfloat16 Llama with float32 master weights and AdamW, sharded over 2 and 4
ranks (msrun CPU workers on this machine: speed is not judged, bytes are).

    .venv/bin/python benchmarks/sharded_training.py [--ranks 2,4] [--layers 16] [--steps 2] [--tokens 64]
                                                    [--plot docs/sharded_memory.png] [--no-recycle]

The model is TinyLlama's shape (width 2048, MLP 5632, 32 heads, 4 key/value heads, vocabulary 32000) with
`--layers` layers (16: 0.84 B parameters), random weights in bfloat16. Each rank of one msrun job per rank count:
ports a 1-layer model of the same shape first (the modules a first port imports, outside the measurement), then
from its baseline (the process's resident memory before the model exists) builds the model, shards it
(aot_ops.shard: float32 master shards), ports it (fuse=True), deletes the torch model and trains `--steps` steps of
MindSpore's AdamW (`nn.AdamWeightDecay`) on its own `--tokens` tokens, calling `ms.ms_memory_recycle()` after each
optimizer step as docs/distributed.md advises (`--no-recycle`: the loop without it). It reports its resident peak
during the steps above the baseline (the shards, their gradients, AdamW's two moments, a layer's gathered weights
and its gradients, the activations, MindSpore's own) and what the step's tensors hold (shards, gradients, moments),
against the single-process training state of the same model: 16 bytes a parameter (bfloat16 weights and
gradients, float32 master weights and two moments), the least one device training it alone would hold. The
target: the peak within 1/N of that state + one layer's gathered bfloat16 weights + 15%. On one machine the ranks
together still hold the whole state (and each its own MindSpore and torch).
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _memory import reset_peak, status_bytes  # noqa: E402

SHAPE = dict(hidden_size=2048, intermediate_size=5632, num_attention_heads=32, num_key_value_heads=4,
             vocab_size=32000, attn_implementation="eager")
BYTES_A_PARAMETER = 16  # bfloat16 weight and gradient (2 + 2), float32 master weight, AdamW's two moments (4 x 3)


def _trim() -> None:
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)


def _say(what: str) -> None:
    if os.environ.get("AOT_OPS_BENCH_TRACE"):
        print(f"RSS {what}: {status_bytes('VmRSS') / 1e9:.2f} GB, peak {status_bytes('VmHWM') / 1e9:.2f} GB",
              flush=True)


def _train(layers: int, tokens: int, steps: int, rank: int, size: int, recycle: bool,
           shape: dict = SHAPE) -> dict:
    """Builds, shards and ports the model, then trains it: its figures; the peak counter reset before the steps."""
    import mindspore as ms
    import torch
    import transformers

    import aot_ops

    class Loss(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids, labels=input_ids, use_cache=False).loss

    config = transformers.LlamaConfig(num_hidden_layers=layers, **shape)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16).train()
    parameters = sum(p.numel() for p in model.parameters())
    layer = sum(p.numel() for p in model.model.layers[0].parameters())
    ids = torch.randint(0, config.vocab_size, (size, tokens), generator=torch.Generator().manual_seed(1))[rank:rank + 1]
    _say("built")
    start = time.perf_counter()
    cell = aot_ops.from_torch(aot_ops.shard(Loss(model)), (ids,), input_grads=False, fuse=True)
    port_s = time.perf_counter() - start
    _say("ported")
    del model
    _trim()
    _say("torch model deleted")
    held = sum(p.nbytes for p in cell.get_parameters())
    reset_peak()
    cell.set_train(True)
    params = cell.trainable_params()
    grad_fn = ms.value_and_grad(cell, None, params)
    optimizer = ms.nn.AdamWeightDecay(params, learning_rate=1e-5, weight_decay=0.01)
    losses, times = [], []
    for _ in range(steps):
        start = time.perf_counter()
        loss, grads = grad_fn(ms.Tensor(ids.numpy()))
        _say("gradients")
        optimizer(grads)
        # what the step's tensors hold: the shards, their gradients and AdamW's two moments
        live = held + sum(g.nbytes for g in grads) + sum(p.nbytes for p in optimizer.moments1 + optimizer.moments2)
        losses.append(float(loss.asnumpy()))
        _say("step")
        del grads
        if recycle:
            # nn.AdamWeightDecay's construct is an ms.jit graph, which keeps its memory (as large as the gradients)
            # until its next call: handed back before the next backward (docs/distributed.md)
            ms.ms_memory_recycle()
        times.append(time.perf_counter() - start)
    return dict(parameters=parameters, layer=layer, held=held, live=live, losses=losses, step_s=times, port_s=port_s)


def rank_run(layers: int, tokens: int, steps: int, recycle: bool, out: str) -> None:
    """One rank of the msrun job."""
    import aot_ops

    rank, size = aot_ops.torch_process_group()
    # the first port's imports and MindSpore's first collectives, outside the measurement
    _train(1, 8, 1, rank, size, recycle, dict(SHAPE, hidden_size=64, intermediate_size=128, vocab_size=128))
    _trim()
    baseline = status_bytes("VmRSS")
    row = _train(layers, tokens, steps, rank, size, recycle)
    row.update(rank=rank, size=size, peak=status_bytes("VmHWM") - baseline,
               after=status_bytes("VmRSS") - baseline)
    Path(out, f"rank{rank}.json").write_text(json.dumps(row))


def budget(row: dict) -> tuple[float, float]:
    """(1/N of the single-process state, the target: that + one layer's bfloat16 weights, + 15%), bytes."""
    share = BYTES_A_PARAMETER * row["parameters"] / row["size"]
    return share, (share + 2 * row["layer"]) * 1.15


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--plot")
    parser.add_argument("--no-recycle", action="store_true", help="the loop without ms.ms_memory_recycle()")
    parser.add_argument("--rank-run", help=argparse.SUPPRESS)  # out folder: one msrun rank
    args = parser.parse_args(argv)
    if args.rank_run:
        rank_run(args.layers, args.tokens, args.steps, not args.no_recycle, args.rank_run)
        return 0
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    print(f"uptime: {os.getloadavg()}", flush=True)
    rows = {}
    for ranks in (int(n) for n in args.ranks.split(",")):
        out = tempfile.mkdtemp(prefix=f"sharded_{ranks}_")
        start = time.perf_counter()
        job = subprocess.run(
            [str(bin_dir / "msrun"), f"--worker_num={ranks}", f"--local_worker_num={ranks}", "--master_port=8153",
             f"--log_dir={out}/logs", "--join=True", __file__, "--layers", str(args.layers), "--tokens",
             str(args.tokens), "--steps", str(args.steps), "--rank-run", out]
            + (["--no-recycle"] if args.no_recycle else []),
            env=env, cwd=out, capture_output=True, text=True)
        if job.returncode:
            print(f"{ranks} ranks: the job failed, logs in {out}/logs", flush=True)
            continue
        rows[ranks] = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(ranks)]
        first = rows[ranks][0]
        print(f"{ranks} ranks ({time.perf_counter() - start:.0f} s; {first['parameters'] / 1e9:.2f} B parameters, "
              f"a layer {first['layer'] / 1e6:.0f} M; single-process state "
              f"{BYTES_A_PARAMETER * first['parameters'] / 1e9:.2f} GB):", flush=True)
        for row in rows[ranks]:
            share, target = budget(row)
            print(f"  rank {row['rank']}: shards {row['held'] / 1e9:.2f} GB; shards, gradients and moments "
                  f"{row['live'] / 1e9:.2f} GB = {row['live'] / share:.3f}x its 1/N of the state; "
                  f"peak {row['peak'] / 1e9:.2f} GB "
                  f"= {row['peak'] / share:.3f}x its 1/N of the state ({share / 1e9:.2f} GB; target "
                  f"{target / 1e9:.2f} GB: {'met' if row['peak'] <= target else 'NOT met'}); after the steps "
                  f"{row['after'] / 1e9:.2f} GB; losses {[round(x, 4) for x in row['losses']]}; port "
                  f"{row['port_s']:.0f} s, steps {[round(t) for t in row['step_s']]} s", flush=True)
    print(f"uptime at the end: {os.getloadavg()}", flush=True)
    if args.plot and rows:
        _plot(rows, args.plot)
    return 0


def _plot(rows: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    labels, peaks, shares, targets = [], [], [], []
    for ranks, ranked in rows.items():
        for row in ranked:
            share, target = budget(row)
            labels.append(f"{ranks} ranks\nrank {row['rank']}")
            peaks.append(row["peak"] / 1e9)
            shares.append(share / 1e9)
            targets.append(target / 1e9)
    x = range(len(labels))
    ax.bar([i - 0.2 for i in x], shares, 0.4, label="1/N of the single-process state (16 B a parameter)")
    ax.bar([i + 0.2 for i in x], peaks, 0.4, label="resident peak during the steps")
    ax.scatter(list(x), targets, color="black", marker="_", s=400, label="target: + a layer's weights + 15%")
    ax.set_xticks(list(x), labels)
    ax.set_ylabel("GB per rank")
    ax.set_title("Sharded AdamW training per rank (bfloat16, float32 master shards)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
