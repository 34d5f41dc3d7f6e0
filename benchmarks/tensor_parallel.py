"""Tensor parallel from a checkpoint folder: per-rank bytes read, per-rank memory and greedy tokens against
single-process torch, at 2 and 4 ranks (msrun CPU workers on this machine: speed is not judged, bytes are).

    .venv/bin/python benchmarks/tensor_parallel.py [--models llama-1b,qwen2-0.6b] [--ranks 2,4] [--tokens 32]
                                                   [--dtype bfloat16|float32] [--fuse true|false] [--root DIR]

Each model is a checkpoint of random bfloat16 weights written once into `--root` (benchmarks/port_pretrained.py's
writer). torch decodes `--tokens` greedy tokens after a 12-token prompt from transformers' own from_pretrained
(`--dtype`: the weights' dtype in torch and in the port) in a process of its own, keeping each step's logit margin
(best minus second best) and the first step's logits. Then, for each rank count, one msrun job: every rank ports
a tiny checkpoint of the same model type first (the modules a first port imports, outside the measurement), then
calls `aot_ops.from_pretrained(folder, max_length=..., fuse=..., dtype=..., tensor_parallel=N)` (`--fuse`:
true, the default, runs programs between the collectives; false, one aot call per node) and
`aot_ops.generate`, and reports
- the bytes its reads asked for (`rchar` of /proc/self/io around from_pretrained) against its share (its slices
  of the split tensors, the replicated ones whole) and the checkpoint's size;
- its resident peak above the process before from_pretrained (the weights are read into private memory; nothing
  is mapped), against the weights it holds (1/N of the split tensors, the replicated ones whole);
- its tokens; where they differ from torch's, the step and both margins (a near tie within the dtype's rounding);
  and its first step's logits against torch's (largest difference over the largest logit).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _memory import reset_peak, status_bytes  # noqa: E402
from port_pretrained import MODELS, checkpoint, margin, port_step_logits, prompt  # noqa: E402

MODELS = dict(MODELS, **{  # a Qwen2 whose 16 heads and 4 key/value heads split over 2 and 4 ranks (Qwen2-0.5B's
    # 14 heads and 2 key/value heads do not split over 4: a named error)
    "qwen2-0.6b": ("Qwen2Config", dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                       num_key_value_heads=4, intermediate_size=4864, vocab_size=151936,
                                       tie_word_embeddings=True)),
})
PROMPT = 12  # port_pretrained.prompt()'s tokens


def _read_bytes() -> int:
    return int(dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())["rchar"])


def torch_reference(folder: str, tokens: int, dtype: str, logits_file: str) -> dict:
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    ids = prompt()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False,
                             pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    torch.save(out.logits[0].float(), logits_file)
    return {"tokens": out.sequences[0, PROMPT:].tolist(), "margins": [margin(step) for step in out.logits]}


def rank_run(folder: str, tiny: str, tokens: int, dtype: str, fuse: bool, out: str) -> None:
    """One rank of the msrun job."""
    import gc

    import torch

    import aot_ops
    import aot_ops._port.lm.kv_cache  # noqa: F401 - imported before the baseline, as a user's process has it
    import aot_ops._port.lm.pretrained  # noqa: F401
    from aot_ops._core.convert import to_ms, to_torch

    rank, size = aot_ops.torch_process_group()
    # what a first port imports (torch.export, the model's modules, ...) read outside the measurement
    aot_ops.generate(aot_ops.from_pretrained(tiny, max_length=PROMPT + 2, fuse=fuse, tensor_parallel=size),
                     to_ms(prompt()), max_new_tokens=2)
    gc.collect()
    reset_peak()
    rss, read = status_bytes("VmRSS"), _read_bytes()
    start = time.perf_counter()
    lm = aot_ops.from_pretrained(folder, max_length=PROMPT + tokens, fuse=fuse, dtype=getattr(torch, dtype),
                                 tensor_parallel=size)
    seconds = time.perf_counter() - start
    read = _read_bytes() - read
    held = sum(p.nbytes for p in lm.cell.get_parameters() if "_cache_" not in p.name)
    start = time.perf_counter()
    ids = prompt()
    ours = to_torch(aot_ops.generate(lm, to_ms(ids), max_new_tokens=tokens))[0, PROMPT:].tolist()
    decode = time.perf_counter() - start
    peak = status_bytes("VmHWM") - rss
    steps = port_step_logits(lm, ids, ours)
    margins, first_logits = [margin(logits) for logits in steps], steps[0].float().reshape(-1)
    reference = torch.load(Path(out).parent / "torch_logits.pt")[0]
    logits_error = float((first_logits - reference).abs().max() / reference.abs().max())
    # its share as the checkpoint stores it (a split tensor's slice, a replicated one whole): the pieces the
    # loading asks for, planned again on the meta device (nothing read)
    from aot_ops._port.lm.pretrained import _Loading

    share_bytes = sum(stored.end - stored.start
                      for stored, _ in _Loading(folder, getattr(torch, dtype), None, size).targets)
    Path(out, f"rank{rank}.json").write_text(json.dumps(dict(
        rank=rank, size=size, read=read, share=share_bytes, held=held, peak=peak, tokens=ours, margins=margins,
        logits_error=logits_error, from_pretrained_s=seconds, decode_s=decode)))


def _tiny_checkpoint(root: str, name: str) -> str:
    """A 1-layer checkpoint of `name`'s model type and head layout, for the ranks' warm-up port."""
    folder = os.path.join(root, f"{name}-tiny")
    if not os.path.exists(os.path.join(folder, "config.json")):
        import torch
        import transformers

        from aot_ops.tools.random_checkpoint import write_random_checkpoint

        kind, config = MODELS[name]
        tiny = dict(config, hidden_size=config["num_attention_heads"] * 8, num_hidden_layers=1,
                    intermediate_size=64, vocab_size=512)
        write_random_checkpoint(folder, getattr(transformers, kind)(**tiny), dtype=torch.bfloat16)
    return folder


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="llama-1b,qwen2-0.6b")
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--fuse", default="true", choices=("true", "false"))
    parser.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "aot_ops_checkpoints"))
    parser.add_argument("--rank-run", nargs=3, help=argparse.SUPPRESS)  # folder, tiny folder, out: one msrun rank
    args = parser.parse_args(argv)
    if args.rank_run:
        rank_run(args.rank_run[0], args.rank_run[1], args.tokens, args.dtype, args.fuse == "true", args.rank_run[2])
        return 0
    import port_pretrained

    port_pretrained.MODELS.update(MODELS)
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    print(f"uptime: {os.getloadavg()}", flush=True)
    for name in args.models.split(","):
        folder = checkpoint(args.root, name)
        tiny = _tiny_checkpoint(args.root, name)
        size = sum(p.stat().st_size for p in Path(folder).glob("*.safetensors"))  # bfloat16 on disk
        work = tempfile.mkdtemp(prefix=f"tp_{name}_")
        logits_file = os.path.join(work, "torch_logits.pt")
        reference = json.loads(subprocess.run(
            [sys.executable, "-c", f"import sys, json; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
             f"import tensor_parallel as t; print(json.dumps(t.torch_reference({folder!r}, {args.tokens}, "
             f"{args.dtype!r}, {logits_file!r})))"],
            check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        print(f"{name} ({args.dtype}, fuse={args.fuse}): a checkpoint of {size / 1e9:.2f} GB; "
              f"torch's tokens {reference['tokens']}",
              flush=True)
        for ranks in (int(n) for n in args.ranks.split(",")):
            out = os.path.join(work, f"ranks{ranks}")
            os.makedirs(out)
            start = time.perf_counter()
            job = subprocess.run(
                [str(bin_dir / "msrun"), f"--worker_num={ranks}", f"--local_worker_num={ranks}",
                 "--master_port=8151", f"--log_dir={out}/logs", "--join=True", __file__, "--tokens",
                 str(args.tokens), "--dtype", args.dtype, "--fuse", args.fuse, "--rank-run", folder, tiny, out],
                env=env, cwd=out,
                capture_output=True, text=True)
            if job.returncode:
                print(f"  {ranks} ranks: the job failed, logs in {out}/logs", flush=True)
                continue
            print(f"  {ranks} ranks ({time.perf_counter() - start:.0f} s):", flush=True)
            for r in range(ranks):
                row = json.loads(Path(out, f"rank{r}.json").read_text())
                first = next((k for k, (a, b) in enumerate(zip(row["tokens"], reference["tokens"])) if a != b),
                             None)
                tokens = "torch's" if first is None else (
                    f"differ from step {first} (the margins there: torch's {reference['margins'][first]:.4f}, "
                    f"the port's {row['margins'][first]:.4f})")
                print(f"    rank {r}: read {row['read'] / 1e9:.3f} GB (its share {row['share'] / 1e9:.3f} GB, "
                      f"{row['read'] / size:.1%} of the checkpoint); holds {row['held'] / 1e9:.3f} GB; "
                      f"peak {row['peak'] / 1e9:.3f} GB = {row['peak'] / row['held']:.2f}x its weights; "
                      f"tokens {tokens}; first logits within {row['logits_error']:.1e}; "
                      f"from_pretrained {row['from_pretrained_s']:.0f} s, {args.tokens} tokens "
                      f"{row['decode_s']:.0f} s", flush=True)
    print(f"uptime at the end: {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
