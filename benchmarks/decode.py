"""Decoding speed of a causal LM ported with its key/value cache (aot_ops.from_torch_lm), against torch (CPU).

    .venv/bin/python benchmarks/decode.py [--threads 1] [--new 128,512] [--rounds 3]
    .venv/bin/python benchmarks/decode.py --plot docs/decode.png [--lengths 32,64,128,256,512]
    .venv/bin/python benchmarks/decode.py --breakdown [--new 128]
    .venv/bin/python benchmarks/decode.py --batch 8 --new 128,2048 --fuses fused,compiled
    .venv/bin/python benchmarks/decode.py --model llama-1b --new 32 --fuses fused,compiled --rounds 3
    .venv/bin/python benchmarks/decode.py --new 128,512,2048 --fuses fused,compiled --tokens-per-call 1,8

The model: a 4-layer Qwen2 (hidden 256, 8 heads, 2 key/value heads, intermediate 512, vocab 1000) with random
weights (or, `--model llama-1b`, TinyLlama's shape in bfloat16), batch 1 (or `--batch`, left-padded prompts), a
prompt of 16 tokens, greedy decoding of exactly N new tokens (no end token). Rows: torch's
`generate` (its dynamic cache; torch.no_grad), then the port through `aot_ops.generate`: per node, fused and
compiled (`from_torch_lm(..., fuse=...)`: the one-token step compiled by AOTInductor, the prompt interpreted;
with `--tokens-per-call k`, also each port decoding k greedy tokens a call), in
PyNative (each call one compiled graph, the default) and GRAPH_MODE, each ported for its N with a cache of 16 + N
positions (a static cache is sized at port time; each step attends to the positions written); and, for reference, the fused port without a cache (from_torch with use_cache=False and a dynamic
sequence: every step runs the whole sequence), GRAPH_MODE. Each figure is new tokens per second over a whole
`generate` call (prefill included), the median of --rounds calls after one warm-up call (which compiles), and the
median ratio to torch's, each call timed right after one of torch's (the machine's speed drifts within minutes). Every port's tokens are checked against torch's first.
`--plot`: tokens/s against the number of new tokens, for each row, into a PNG.
`--breakdown`: where one decode step's time goes (a cache of 16 + N positions, GRAPH_MODE): the ported cell's
call, the program inside it (aot_ops.program_seconds), the same for a call of 8 greedy steps (tokens_per_call=8),
and torch eager's forward of the same step (the model with the same StaticCache, no generate loop), interleaved in
--rounds blocks of 200 calls.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import mindspore as ms
import numpy as np
import torch
import transformers

import aot_ops
from aot_ops import aten
from aot_ops._core.convert import to_ms, to_torch

PROMPT = 16
BLOCK = 8  # tokens a call of --breakdown's block rows


def qwen2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.Qwen2Config(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=4096,
                                      use_cache=True)
    return _for_decoding(transformers.Qwen2ForCausalLM(config).eval())


def llama_1b() -> torch.nn.Module:
    """TinyLlama's shape (1.1B parameters) in bfloat16, random weights: compute-bound decoding."""
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                                      num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=4096,
                                      use_cache=True)
    return _for_decoding(transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval())


def _for_decoding(model: torch.nn.Module) -> torch.nn.Module:
    model.generation_config.eos_token_id = None  # exactly max_new_tokens every time
    model.generation_config.pad_token_id = 0
    return model


MODELS = {"qwen2": qwen2, "llama-1b": llama_1b}
FUSES = {"node": (False, "per node"), "fused": (True, "fused"), "compiled": ("compile", "compiled")}


def prompts(batch: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`batch` prompts of PROMPT positions, left-padded: row k has k % 4 padding positions (token 0, mask 0)."""
    ids = torch.randint(3, vocab, (batch, PROMPT), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    for k in range(batch):
        ids[k, :k % 4] = 0
        mask[k, :k % 4] = 0
    return ids, mask


def seconds_of(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def measure(lengths: list[int], rounds: int, model_name: str = "qwen2", batch: int = 1,
            fuses: tuple[str, ...] = ("node", "fused", "compiled"),
            per_call: tuple[int, ...] = (1,)) -> tuple[dict, dict]:
    """(row name -> {new tokens: median tokens per second}, row name -> {new tokens: median ratio to torch}).
    Each port's rounds alternate with torch's (a round of each, `rounds` times): the machine's speed drifts by
    tens of percent within minutes, and each ratio compares two calls made seconds apart. Tokens per second count
    every sequence of the batch."""
    model = MODELS[model_name]()
    ids, mask = prompts(batch, model.config.vocab_size)
    ids_ms, mask_ms = to_ms(ids), to_ms(mask)
    rates: dict[str, dict[int, float]] = {}
    ratios: dict[str, dict[int, float]] = {}
    torch_times: dict[int, list[float]] = {n: [] for n in lengths}

    def torch_call(n):
        with torch.no_grad():
            return model.generate(ids, attention_mask=mask, max_new_tokens=n, do_sample=False)

    def record(name, n, call, expected=None):
        out = call()  # warm-up: compiles
        if expected is not None and to_torch(out).tolist() != expected:
            if model_name == "qwen2":  # float32: tokens must be equal
                raise SystemExit(f"{name}: tokens differ from torch's")
            got = to_torch(out).tolist()
            step = min(k for row, want in zip(got, expected) for k in range(len(want)) if row[k] != want[k]) - PROMPT
            print(f"{name}, {n} new: tokens differ from torch's from new token {step} on (bfloat16: see "
                  "docs/performance.md on near ties)")
        ours, theirs = [], []
        for _ in range(rounds):
            theirs.append(seconds_of(lambda: torch_call(n)))
            ours.append(seconds_of(call))
        torch_times[n].extend(theirs)
        rates.setdefault(name, {})[n] = batch * n / statistics.median(ours)
        ratios.setdefault(name, {})[n] = statistics.median(t / o for t, o in zip(theirs, ours))

    expected = {n: torch_call(n).tolist() for n in lengths}
    for (fuse, label), k in ((FUSES[f], k) for f in fuses for k in per_call):
        if k > 1:
            if fuse is False:
                continue  # a block of per-node steps: as many launches as the steps
            label = f"{label}, {k} a call"
        for n in lengths:
            lm = aot_ops.from_torch_lm(model, batch_size=batch, max_length=PROMPT + n, fuse=fuse, tokens_per_call=k)
            for mode, mode_name in ((ms.PYNATIVE_MODE, "PyNative"), (ms.GRAPH_MODE, "GRAPH_MODE")):
                ms.set_context(mode=mode)
                record(f"{mode_name}, {label}", n,
                       lambda: aot_ops.generate(lm, ids_ms, attention_mask=mask_ms, max_new_tokens=n), expected[n])
                ms.set_context(mode=ms.PYNATIVE_MODE)
    rates = {"torch generate (its cache)": {n: batch * n / statistics.median(t) for n, t in torch_times.items()},
             **rates}
    ratios["torch generate (its cache)"] = {n: 1.0 for n in lengths}
    if model_name != "qwen2" or "fused" not in fuses:
        return rates, ratios
    # the port without a cache: every step runs the whole sequence
    seq = torch.export.Dim("seq", min=2, max=PROMPT + max(lengths))
    cell = aot_ops.from_torch(model, (), {"input_ids": ids, "attention_mask": mask, "use_cache": False},
                              dynamic_shapes={"input_ids": {1: seq}, "attention_mask": {1: seq}}, fuse=True)
    ms.set_context(mode=ms.GRAPH_MODE)
    record("GRAPH_MODE, fused, no cache", lengths[0],
           lambda: aot_ops.generate(cell, ids_ms, attention_mask=mask_ms, max_new_tokens=lengths[0]),
           expected[lengths[0]])
    ms.set_context(mode=ms.PYNATIVE_MODE)
    return rates, ratios


class _FloorCell(ms.nn.Cell):
    """MindSpore's cost of calling a graph: one aot operator (aten::add of 8 numbers) and 8 Parameter assignments,
    as a decode step's graph has one program and the 8 cache assignments of a 4-layer model."""

    def __init__(self):
        super().__init__()
        self.add = aten.op("aten::add.Tensor")
        self.caches = ms.ParameterTuple(ms.Parameter(ms.Tensor(np.zeros((1, 8), np.float32)), name=f"cache{i}")
                                        for i in range(8))
        self.assign = ms.ops.Assign()

    def construct(self, x):
        y = self.add(x, x)
        for cache in self.caches:
            self.assign(cache, y)
        return y


def breakdown(new: int, rounds: int) -> None:
    """Milliseconds per one-token step: the ported cell's call and its program, fused and compiled, GRAPH_MODE,
    against torch eager's forward of the same wrapped model (blocks of 200 calls, interleaved; medians)."""
    from aot_ops._port.lm.kv_cache import StaticCacheLM

    model = qwen2()
    length = PROMPT + new
    position = PROMPT + new // 2
    step = {"input_ids": torch.tensor([[7]]), "attention_mask": torch.ones(1, length, dtype=torch.long),
            "position_ids": torch.tensor([[position]]), "cache_position": torch.tensor([position])}
    wrapped = StaticCacheLM(model, 1, length).eval()
    ms.set_context(mode=ms.GRAPH_MODE)
    lms = {label: aot_ops.from_torch_lm(model, batch_size=1, max_length=length, fuse=fuse, tokens_per_call=BLOCK)
           for fuse, label in ((True, "fused"), ("compile", "compiled"))}
    args = [to_ms(step[k]) for k in ("input_ids", "attention_mask", "position_ids", "cache_position")]
    # a block's mask: the positions written, this call's first included
    block_args = [args[0], to_ms(torch.ones(1, position + 1, dtype=torch.long)), *args[2:]]
    floor, small = _FloorCell(), ms.Tensor(np.zeros((1, 8), np.float32))
    calls = 200
    figures: dict[str, list[float]] = {}

    def timed(name, call):
        call()
        spent, start = aot_ops.program_seconds(), time.perf_counter()
        for _ in range(calls):
            out = call()
        if isinstance(out, ms.Tensor):
            out.asnumpy()
        figures.setdefault(name, []).append((time.perf_counter() - start) / calls * 1e3)
        figures.setdefault(name + ": program", []).append((aot_ops.program_seconds() - spent) / calls * 1e3)

    for _ in range(rounds):
        with torch.no_grad():
            timed("torch eager forward", lambda: wrapped(**step))
        for label, lm in lms.items():
            timed(f"GRAPH_MODE, {label}", lambda: lm.cell(*args))
            timed(f"GRAPH_MODE, {label}, {BLOCK} a call", lambda: lm.block(*block_args))
        timed("GRAPH_MODE floor: 1 operator, 8 Assign", lambda: floor(small))
    ms.set_context(mode=ms.PYNATIVE_MODE)
    print(f"one decode step, cache of {length} positions, ms per call (median of {rounds} blocks of {calls}):")
    for name, values in figures.items():
        if not name.endswith(("forward: program", "Assign: program")):
            per_token = f"   {statistics.median(values) / BLOCK:.2f} a token" if "a call" in name else ""
            print(f"  {name:<48}{statistics.median(values):>7.2f}{per_token}")


def plot(path: str, rates: dict[str, dict[int, float]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, by_length in rates.items():
        lengths = sorted(by_length)
        axes.plot(lengths, [by_length[n] for n in lengths], marker="o", label=name)
    axes.set_xscale("log", base=2)
    axes.set_xlabel("new tokens (prompt 16, batch 1)")
    axes.set_ylabel("tokens / s (whole generate call)")
    axes.set_title(f"4-layer Qwen2 (hidden 256), greedy; torch {torch.get_num_threads()} thread(s), "
                   f"{os.cpu_count()} CPUs", fontsize=9)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"wrote {path}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--new", default="128,512", help="numbers of new tokens (default 128,512)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="timed calls per figure, each beside one of torch's; medians (default 5)")
    parser.add_argument("--plot", metavar="PNG", help="draw tokens/s against the number of new tokens into PNG")
    parser.add_argument("--breakdown", action="store_true", help="where a decode step's time goes")
    parser.add_argument("--lengths", default="32,64,128,256,512", help="numbers of new tokens of --plot")
    parser.add_argument("--model", choices=sorted(MODELS), default="qwen2",
                        help="qwen2: the 4-layer model (default); llama-1b: TinyLlama's shape in bfloat16")
    parser.add_argument("--batch", type=int, default=1, help="sequences per call, left-padded (default 1)")
    parser.add_argument("--fuses", default="node,fused,compiled",
                        help=f"which ports, of {','.join(FUSES)} (default all)")
    parser.add_argument("--tokens-per-call", default="1",
                        help="greedy tokens a call decodes (from_torch_lm's tokens_per_call), a row each (e.g. 1,8)")
    options = parser.parse_args(argv)
    torch.set_num_threads(options.threads)
    ms.set_device("CPU")
    lengths = [int(n) for n in (options.lengths if options.plot else options.new).split(",")]
    print(f"torch {torch.__version__} ({torch.get_num_threads()} thread(s)), mindspore {ms.__version__}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    if options.breakdown:
        return breakdown(lengths[0], options.rounds)
    print(f"model {options.model}, batch {options.batch}")
    rates, ratios = measure(lengths, options.rounds, options.model, options.batch, tuple(options.fuses.split(",")),
                            tuple(int(k) for k in options.tokens_per_call.split(",")))
    print(f"{'':<40}" + "".join(f"{f'{n} new':>22}" for n in lengths))
    for name, by_length in rates.items():
        cells = "".join(f"{by_length[n]:>11.0f} tok/s {ratios[name][n]:>4.2f}x" if n in by_length else
                        f"{'-':>22}" for n in lengths)
        print(f"{name:<40}{cells}")
    if options.plot:
        plot(options.plot, rates)


if __name__ == "__main__":
    sys.exit(main())
