"""Quantized checkpoints from their folder: the memory a port takes against the packed checkpoint's size, and its
greedy tokens against torch's on the same quantized model.

    .venv/bin/python benchmarks/quantized_checkpoints.py [--models llama-1b-int8,llama-1b-int4,qwen2-14b-int8]
                                                         [--root DIR] [--plot docs/quantized_checkpoints.png]

Each model is a folder of random weights written once, shard by shard, into `--root`
(aot_ops.tools.random_checkpoint): "-int8" as transformers saves a model quantized with TorchAoConfig(
Int8WeightOnlyConfig()) (the linear layers' int8 matrices and scales; embeddings, norms and the output layer in
bfloat16), "-int4" as llmcompressor saves a compressed-tensors int4 model (pack-quantized, a scale per 128 inputs,
the output layer bfloat16). llama-1b is TinyLlama's shape (1.1B parameters), qwen2-14b Qwen2.5-14B's (48 layers,
hidden 5120; ~16 GB as int8). Each measurement runs in a fresh process:
- `aot_ops.from_pretrained(folder, max_length=64)` (fuse=True), twice: the model's first port (AOT_OPS_PORT_CACHE=0:
  exported and fused), and a port whose plan an earlier port kept (aot_ops/_port/plan_cache.py; one run to keep
  it first). Each: its wall time; the private (anonymous) memory's peak above the process before it, sampled
  every 5 ms (_memory.PrivatePeak), and after it; the resident peak (VmHWM: with the pages of the libraries the
  port first calls), as multiples of the packed checkpoint (the safetensors data: what the folder stores). Nothing
  is mapped: the files are read into the Parameters (int4 weights repacked for ATen's CPU kernel one matrix at a
  time, by the reader beside the port).
- 8 greedy tokens after a 12-token prompt with aot_ops.generate (both peaks again, with them). Then, in a process of
  its own, torch decodes the same tokens from aot_ops.load_pretrained(folder) (the torch model over the same packed
  weights, as torchao's tensor subclasses) with transformers' generate, its int8 layers computing with ATen's int8
  kernel as the port's do (aot_ops.testing.same_kernels_as_port).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time

from _memory import PrivatePeak, anonymous_bytes, child_result, reset_peak, status_bytes

SHAPES = {  # name -> (config class, config)
    "llama-1b": ("LlamaConfig", dict(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32,
                                     num_key_value_heads=4, intermediate_size=5632, vocab_size=32000,
                                     max_position_embeddings=2048)),
    "qwen2-14b": ("Qwen2Config", dict(hidden_size=5120, num_hidden_layers=48, num_attention_heads=40,
                                      num_key_value_heads=8, intermediate_size=13824, vocab_size=152064,
                                      tie_word_embeddings=False)),
}


def checkpoint(root: str, name: str) -> str:
    folder = os.path.join(root, name)
    if not os.path.exists(os.path.join(folder, "config.json")):
        import torch
        import transformers

        from aot_ops.tools.random_checkpoint import write_random_checkpoint

        shape, scheme = name.rsplit("-", 1)
        kind, config = SHAPES[shape]
        quantization = "compressed-tensors:int4" if scheme == "int4" else _int8()
        start = time.perf_counter()
        write_random_checkpoint(folder + ".part", getattr(transformers, kind)(**config), dtype=torch.bfloat16,
                                quantization=quantization)
        os.rename(folder + ".part", folder)
        print(f"{name}: written in {time.perf_counter() - start:.0f} s", flush=True)
    return folder


def _int8():
    from torchao.quantization import Int8WeightOnlyConfig

    return Int8WeightOnlyConfig()


# ---- measured in the child process ---------------------------------------------------------------------------------

def prompt():
    import torch

    torch.manual_seed(0)
    return torch.randint(2, 30000, (1, 12))


def measure_port(folder: str) -> dict:
    import gc

    import torch
    import transformers

    import aot_ops
    import aot_ops._port.lm.kv_cache  # noqa: F401 - imported before the baseline, as a user's process has it
    import aot_ops._port.lm.pretrained  # noqa: F401
    from aot_ops._core.convert import to_ms, to_torch
    from aot_ops._port.lm.checkpoint import Checkpoint

    importlib.import_module("torchao.quantization")  # imported before the baseline, as a user's process has it
    torch.set_num_threads(os.cpu_count() or 1)
    packed = Checkpoint(folder).nbytes
    config = transformers.AutoConfig.from_pretrained(folder)
    transformers.AutoModelForCausalLM._model_mapping[type(config)]  # the model type's modules, imported before
    gc.collect()
    reset_peak()
    rss, anonymous = status_bytes("VmRSS"), anonymous_bytes()
    start = time.perf_counter()
    with PrivatePeak() as private:
        lm = aot_ops.from_pretrained(folder, max_length=64)
    seconds = time.perf_counter() - start
    row = {"packed_GB": packed / 1e9, "from_pretrained_s": seconds, "private_peak": (private.peak - anonymous) / packed,
           "peak": (status_bytes("VmHWM") - rss) / packed, "private_after": (anonymous_bytes() - anonymous) / packed,
           "parameters_GB": sum(p.nbytes for p in lm.cell.get_parameters() if "_cache_" not in p.name) / 1e9}
    with PrivatePeak() as decoding:
        row["tokens"] = to_torch(aot_ops.generate(lm, to_ms(prompt()), max_new_tokens=8))[0, 12:].tolist()
    row["private_peak_with_decoding"] = (max(private.peak, decoding.peak) - anonymous) / packed
    row["peak_with_decoding"] = (status_bytes("VmHWM") - rss) / packed
    return row


def measure_torch(folder: str) -> dict:
    """torch's tokens, in a process of their own (a 14B's weights fit this machine once)."""
    import torch

    import aot_ops
    from aot_ops.testing import same_kernels_as_port

    torch.set_num_threads(os.cpu_count() or 1)
    model = aot_ops.load_pretrained(folder)
    ids = prompt()
    with torch.no_grad(), same_kernels_as_port(model):
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                             pad_token_id=0)
    return {"torch_tokens": out[0, 12:].tolist()}


# ---- the parent ----------------------------------------------------------------------------------------------------

def run_child(kind: str, folder: str, **environment: str) -> dict | None:
    return child_result(__file__, ["--child", kind, folder], f"{folder} ({kind})", **environment)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="llama-1b-int8,llama-1b-int4,qwen2-14b-int8")
    parser.add_argument("--root", default="/tmp/aot_ops-checkpoints")
    parser.add_argument("--plot", metavar="PNG")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "FOLDER"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        kind, folder = options.child
        print("RESULT " + json.dumps(measure_port(folder) if kind == "port" else measure_torch(folder)), flush=True)
        return 0
    print(f"load average {os.getloadavg()[0]:.2f}; memory as multiples of the packed checkpoint, above the process "
          "before loading", flush=True)
    rows = []
    for name in [m for m in options.models.split(",") if m]:
        folder = checkpoint(options.root, name)
        first = run_child("port", folder, AOT_OPS_PORT_CACHE="0")
        run_child("port", folder)  # keeps the port's plan (aot_ops/_port/plan_cache.py), if not kept yet
        kept, reference = run_child("port", folder), run_child("torch", folder)
        if first is None or kept is None or reference is None:
            continue
        rows.append({"model": name, "first": first, "kept": kept, **reference})
        for label, row in (("first port", first), ("plan kept", kept)):
            _print_row(name, label, row, reference["torch_tokens"])
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    if options.plot and rows:
        plot(options.plot, rows)
    return 0


def _print_row(name: str, label: str, row: dict, torch_tokens: list[int]) -> None:
    same = row["tokens"] == torch_tokens
    print(f"{name} ({label}): packed checkpoint {row['packed_GB']:.2f} GB (the cell's Parameters "
          f"{row['parameters_GB']:.2f} GB), from_pretrained {row['from_pretrained_s']:.1f} s, private peak "
          f"{row['private_peak']:.3f}x (resident {row['peak']:.3f}x), private after {row['private_after']:.3f}x, "
          f"with 8 tokens decoded private peak {row['private_peak_with_decoding']:.3f}x (resident "
          f"{row['peak_with_decoding']:.3f}x); 8 tokens {'equal' if same else 'DIFFER'}"
          f" torch's ({row['tokens']} / {torch_tokens})", flush=True)


def plot(path: str, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    bars = [("first port: private peak", "first", "private_peak"), ("first port: resident peak", "first", "peak"),
            ("plan kept: private peak", "kept", "private_peak"),
            ("plan kept: private peak with 8 tokens decoded", "kept", "private_peak_with_decoding")]
    width = 0.8 / len(bars)
    for k, (label, run, figure_name) in enumerate(bars):
        axes.bar([i + (k - 1.5) * width for i in range(len(rows))], [r[run][figure_name] for r in rows],
                 width=width, label=label)
    axes.axhline(1.1, color="red", linewidth=0.8, linestyle="--", label="target 1.1x")
    axes.set_ylim(0.9, 1.35)
    axes.set_xticks(range(len(rows)), [f"{r['model']}\n{r['kept']['packed_GB']:.2f} GB" for r in rows])
    axes.set(ylabel="x the packed checkpoint", title="from_pretrained of a quantized folder: memory")
    axes.legend(loc="upper left", ncol=2, fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
