"""Port time and memory against model size: Llama-shaped causal LMs from about 10M to 1.1B parameters, float32
and bfloat16, each measured in a fresh process.

    .venv/bin/python benchmarks/port_memory.py [--sizes 10M,50M,200M,1B|bert-base] [--dtypes float32,bfloat16]
                                               [--use generate|evaluate|train] [--plot docs/port_memory.png]

Per model (random weights, built in the measuring process): the resident memory before the model is built (the
baseline: Python, torch, MindSpore and aot_ops loaded), then, as multiples of the weights' bytes above that
baseline: after building the model, the peak while porting, the peak of the use that follows, and what stays
after deleting the torch model. Peaks are Linux's VmHWM, reset before each phase (/proc/self/clear_refs).
Uses: `generate` (from_torch_lm, fuse=True, then 8 greedy tokens checked against torch's generate), `evaluate`
(from_torch with a dynamic sequence, fuse=True, evaluation_only=True, one forward checked against torch;
`evaluate-both`: the same port with its training graph too, as from_torch's default), `train` (from_torch with
input_grads=False, fuse=True, one SGD step: its loss against torch's, then the loss of the updated weights, which
the torch module shares, against torch's). All ports share the weights with the torch module (share_weights).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from _memory import reset_peak, status_bytes

SIZES = {  # name -> (hidden, layers, heads, key/value heads, intermediate, vocab)
    "10M": (256, 4, 8, 2, 688, 8000),
    "50M": (512, 8, 8, 2, 1376, 16000),
    "200M": (1024, 12, 16, 4, 2816, 32000),
    "1B": (2048, 22, 32, 4, 5632, 32000),  # TinyLlama's shape
}
# BERT-base (BertModel, 109M parameters): `--sizes bert-base --use evaluate`, batch 8, sequence 128
BERT_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                 vocab_size=30522)


def _rss_mb(field: str = "VmRSS") -> float:
    return status_bytes(field) / 2**20


def measure_one(size: str, dtype_name: str, use: str) -> dict:
    """Runs in the child process."""
    import gc

    import mindspore as ms
    import torch
    import transformers

    import aot_ops
    from aot_ops._core.convert import to_ms, to_torch
    from aot_ops.testing import LanguageModellingLoss

    torch.set_num_threads(1)
    bert = size == "bert-base"
    if bert and use != "evaluate":
        raise SystemExit("bert-base is measured with --use evaluate")
    dtype = getattr(torch, dtype_name)
    ms.set_context(mode=ms.GRAPH_MODE)
    gc.collect()
    baseline = _rss_mb()
    torch.manual_seed(0)
    if bert:
        vocab, shape = BERT_BASE["vocab_size"], (8, 128)
        model = transformers.BertModel(transformers.BertConfig(**BERT_BASE)).to(dtype).eval()
    else:
        hidden, layers, heads, kv_heads, intermediate, vocab = SIZES[size]
        shape = (1, 8)
        config = transformers.LlamaConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                                          num_key_value_heads=kv_heads, intermediate_size=intermediate,
                                          vocab_size=vocab, max_position_embeddings=256)
        model = transformers.LlamaForCausalLM(config).to(dtype).eval()
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values()) / 2**20
    built = _rss_mb()
    ids = torch.randint(3, vocab, shape, generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)

    reset_peak()
    start = time.perf_counter()
    if use == "generate":
        ported = aot_ops.from_torch_lm(model, max_length=32, fuse=True)
    elif use.startswith("evaluate"):
        evaluation_only = use == "evaluate"
        seq = torch.export.Dim("seq", min=2, max=256)
        ported = aot_ops.from_torch(model, (), {"input_ids": ids, "attention_mask": mask, "use_cache": False},
                                    dynamic_shapes={"input_ids": {1: seq}, "attention_mask": {1: seq}}, fuse=True,
                                    evaluation_only=evaluation_only, share_weights=True)
    else:
        model.train()
        ported = aot_ops.from_torch(LanguageModellingLoss(model), (ids,), fuse=True, input_grads=False,
                                    share_weights=True)
    port_seconds = time.perf_counter() - start
    port_peak = _rss_mb("VmHWM")

    reset_peak()
    ids_ms, mask_ms = to_ms(ids), to_ms(mask)
    if use == "generate":
        ours = to_torch(aot_ops.generate(ported, ids_ms, attention_mask=mask_ms, max_new_tokens=8)).tolist()
        with torch.no_grad():
            theirs = model.generate(ids, attention_mask=mask, max_new_tokens=8, do_sample=False,
                                    pad_token_id=0).tolist()
        exact = ours == theirs
    elif use.startswith("evaluate"):
        field = "last_hidden_state" if bert else "logits"
        ours = to_torch(getattr(ported(input_ids=ids_ms, attention_mask=mask_ms), field)).float()
        with torch.no_grad():
            theirs = getattr(model(input_ids=ids, attention_mask=mask, use_cache=False), field).float()
        exact = bool(torch.allclose(ours, theirs, rtol=2e-2 if dtype != torch.float32 else 1e-4, atol=1e-3))
    else:
        # The weights are shared: torch's loss before the step, then torch's loss after MindSpore's step (the
        # module sees the update) against the cell's
        with torch.no_grad():
            before = float(LanguageModellingLoss(model)(ids))
        optimizer = ms.nn.SGD(ported.trainable_params(), learning_rate=1e-3)
        step = aot_ops.train_step(ported, optimizer)
        loss = float(step(ids_ms).asnumpy())
        with torch.no_grad():
            after = float(LanguageModellingLoss(model)(ids))
        loss_after = float(ported(ids_ms).asnumpy())
        exact = abs(loss - before) <= 1e-4 * abs(before) and abs(loss_after - after) <= 1e-4 * abs(after) \
            and after != before
    use_peak = _rss_mb("VmHWM")

    del model
    gc.collect()
    after_delete = _rss_mb()
    ratio = lambda mb: round((mb - baseline) / weights, 2)  # noqa: E731
    return {"size": size, "dtype": dtype_name, "use": use, "parameters_M": round(weights * 2**20 /
            (4 if dtype == torch.float32 else 2) / 1e6), "weights_MB": round(weights), "baseline_MB": round(baseline),
            "built": ratio(built), "port_peak": ratio(port_peak), "use_peak": ratio(use_peak),
            "after_delete": ratio(after_delete), "port_s": round(port_seconds, 1), "equal_to_torch": exact}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10M,50M,200M,1B")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--use", default="generate", choices=("generate", "evaluate", "evaluate-both", "train"))
    parser.add_argument("--plot", metavar="PNG")
    parser.add_argument("--child", nargs=3, metavar=("SIZE", "DTYPE", "USE"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        print("RESULT " + json.dumps(measure_one(*options.child)), flush=True)
        return 0
    print(f"load average {os.getloadavg()[0]:.2f}; memory as multiples of the weights, above the process before "
          f"the model was built; use: {options.use}")
    print(f"{'model':<16}{'weights':>9}{'built':>7}{'port peak':>11}{'use peak':>10}{'model deleted':>15}"
          f"{'port':>8}  equal")
    rows = []
    for dtype in options.dtypes.split(","):
        for size in options.sizes.split(","):
            done = subprocess.run([sys.executable, __file__, "--child", size, dtype, options.use],
                                  capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
            if done.returncode or not lines:
                print(f"{size} {dtype}: failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
                continue
            row = json.loads(lines[0][len("RESULT "):])
            rows.append(row)
            print(f"{size + ' ' + dtype:<16}{row['weights_MB']:>6} MB{row['built']:>6.2f}x{row['port_peak']:>10.2f}x"
                  f"{row['use_peak']:>9.2f}x{row['after_delete']:>14.2f}x{row['port_s']:>7.1f}s  "
                  f"{row['equal_to_torch']}", flush=True)
    if options.plot and rows:
        plot(options.plot, rows, options.use)
    return 0


def plot(path: str, rows: list[dict], use: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (memory, seconds) = plt.subplots(1, 2, figsize=(10, 4))
    for dtype in sorted({r["dtype"] for r in rows}):
        mine = sorted((r for r in rows if r["dtype"] == dtype), key=lambda r: r["weights_MB"])
        sizes = [r["parameters_M"] for r in mine]
        memory.plot(sizes, [r["port_peak"] for r in mine], marker="o", label=f"{dtype}: port peak")
        memory.plot(sizes, [r["after_delete"] for r in mine], marker="x", linestyle="--",
                    label=f"{dtype}: torch model deleted")
        seconds.plot(sizes, [r["port_s"] for r in mine], marker="o", label=dtype)
    for axes in (memory, seconds):
        axes.set_xscale("log")
        axes.set_xlabel("parameters (millions)")
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=7)
    memory.set_ylabel("resident memory / weights")
    seconds.set_ylabel(f"port seconds ({use})")
    figure.suptitle(f"Llama-shaped models, random weights, {os.cpu_count()} CPUs", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
