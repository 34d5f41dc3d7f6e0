"""Decoding speed and weight bytes of a quantized causal LM (torchao) ported with its key/value cache, against torch
running the same quantized model and against the bfloat16 model, ported and in torch (CPU).

    .venv/bin/python benchmarks/quantized_decode.py [--schemes bfloat16,int8,int4] [--new 32] [--rounds 3]
                                                    [--layers 22] [--threads 1]

The model: TinyLlama's shape (1.1B parameters with 22 layers) in bfloat16 with random weights, batch 1, a prompt of
16 tokens, greedy decoding of exactly `--new` tokens. For each scheme the bfloat16 model is built again and quantized
by torchao (int8: Int8WeightOnlyConfig; int4: torchao's CPU int4 layout, group size 128; the linear layers, the LM
head among them; the embedding stays bfloat16), then ported with `from_torch_lm(..., fuse=True)` (its weights shared
with the torch model: held once). Each figure is new tokens per second over a whole `generate` call (prefill
included), the median of --rounds calls after one warm-up call, each port's call right after one of torch's
(torch as torchao runs it). The port's tokens are checked first against torch computing with the port's kernels
(`aot_ops.testing.same_kernels_as_port`: int8 weight-only by ATen's int8 kernel), and where they part from
torchao's own path's is printed. Weight bytes: the cell's Parameters (the packed integers, their
scales, the bfloat16 embedding and norms). torch's `--threads` (default 1, as benchmarks/decode.py) apply to the
port's ATen calls too (one process).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import mindspore as ms
import torch
import transformers

import aot_ops
from aot_ops._core.convert import to_ms, to_torch
from aot_ops.testing import same_kernels_as_port

PROMPT = 16


def model(layers: int, scheme: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                                      num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=4,
                                      max_position_embeddings=4096, use_cache=True)
    lm = transformers.LlamaForCausalLM(config).to(torch.bfloat16).eval()
    lm.generation_config.eos_token_id = None  # exactly max_new_tokens every time
    lm.generation_config.pad_token_id = 0
    if scheme != "bfloat16":
        from torchao.quantization import Int8WeightOnlyConfig, quantize_
        from torchao.prototype.quantization.int4.inference_workflow import PrototypeInt4WeightOnlyConfig

        quantize_(lm, {"int8": Int8WeightOnlyConfig(), "int4": PrototypeInt4WeightOnlyConfig(group_size=128)}[scheme])
    return lm


def measure(layers: int, scheme: str, new: int, rounds: int) -> dict:
    lm = model(layers, scheme)
    ids = torch.randint(3, 32000, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    start = time.perf_counter()
    ported = aot_ops.from_torch_lm(lm, batch_size=1, max_length=PROMPT + new, fuse=True)
    port_s = time.perf_counter() - start
    weights = sum(p.nbytes for p in ported.cell.get_parameters() if "cache" not in p.name)

    def torch_call():
        with torch.no_grad():
            return lm.generate(ids, max_new_tokens=new, do_sample=False)

    def port_call():
        return to_torch(aot_ops.generate(ported, to_ms(ids), max_new_tokens=new))

    expected = torch_call()
    with same_kernels_as_port(lm):
        same_kernels = torch_call()
    got = port_call()  # warm-up: compiles
    if got.tolist() != same_kernels.tolist():
        raise AssertionError(f"{scheme}: the port's tokens differ from torch's on the same kernels")
    # int8: ATen's kernel rounds once where torchao's path rounds twice (docs/porting.md#quantized-models-torchao)
    differ = next((k for k in range(PROMPT, expected.shape[1]) if got[0, k] != expected[0, k]), None)
    torch_s, port_s_calls = [], []
    for _ in range(rounds):
        for timed, call in ((torch_s, torch_call), (port_s_calls, port_call)):
            begin = time.perf_counter()
            call()
            timed.append(time.perf_counter() - begin)
    return dict(scheme=scheme, weights=weights, port_s=port_s, torch=new / statistics.median(torch_s), differ=differ,
                port=new / statistics.median(port_s_calls),
                ratio=statistics.median(t / p for t, p in zip(torch_s, port_s_calls)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schemes", default="bfloat16,int8,int4")
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=22)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    print(f"uptime: {os.getloadavg()}; {args.layers} layers, {args.new} new tokens, torch threads {args.threads}",
          flush=True)
    rows = {}
    for scheme in args.schemes.split(","):
        row = rows[scheme] = measure(args.layers, scheme, args.new, args.rounds)
        parted = "all equal" if row["differ"] is None else f"first differ at new token {row['differ'] - PROMPT + 1}"
        print(f"{scheme:9s} weights {row['weights'] / 1e9:.2f} GB; torch {row['torch']:.2f} tokens/s, port "
              f"{row['port']:.2f} tokens/s = {row['ratio']:.2f}x torch's (per call, median); port "
              f"{row['port_s']:.0f} s; against torchao's own path the tokens {parted}",
              flush=True)
    if "bfloat16" in rows:
        for scheme, row in rows.items():
            if scheme != "bfloat16":
                print(f"{scheme} port / bfloat16 port: {row['port'] / rows['bfloat16']['port']:.2f}x tokens/s, "
                      f"{row['weights'] / rows['bfloat16']['weights']:.2f}x the weight bytes", flush=True)
    print(f"uptime at the end: {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
