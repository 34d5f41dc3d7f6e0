"""Whose rounding a compiled bfloat16 port follows: the greedy tokens of `fuse="compile"` against torch eager's and
torch.compile's (Inductor) on the same model and the same static-cache step.

    .venv/bin/python benchmarks/compiled_tokens.py [--new 32]

The model is decode.py's 1.1B Llama shape in bfloat16 (random weights), its prompt of 16 tokens. Printed: the new
tokens of transformers' `generate` (eager, dynamic cache), of the static-cache wrapper the port exports run eagerly
and compiled by torch.compile (Inductor, static shapes: the prompt eager, each one-token step compiled), of the
same wrapper attending to the positions written, compiled with their number dynamic, then also with the Inductor
settings the port gives a half-precision program (its one-row matrix products as Inductor's own loops: what the port
compiles), of the compiled port and of the fused port; where each first differs from eager; and, up to where each
torch.compile's tokens first differ from the eager step's, each step's margin between the two best logits against
the largest difference torch.compile makes to the logits.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decode  # noqa: E402 - the benchmark's model and prompt

import aot_ops  # noqa: E402
from aot_ops._core.convert import to_ms, to_torch  # noqa: E402
from aot_ops._port.programs.compiled import HALF_PRECISION_MATVEC_CONFIGS  # noqa: E402
from aot_ops._port.lm.kv_cache import StaticCacheLM  # noqa: E402

SETTINGS_ROW = "written part, the port's Inductor settings"


def margin(logits: torch.Tensor) -> float:
    top = torch.topk(logits.float(), 2, dim=-1).values[0]
    return float(top[0] - top[1])


def static_cache_decoding(wrapped, step, ids, mask, new: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy tokens and each step's logits: the prompt through `wrapped`, every new token through `step`. The
    mask covers the whole cache, or, for a wrapper attending to the written part, the positions written (its width
    marked dynamic for torch.compile, as the port compiles it)."""
    length, total = ids.shape[1], wrapped.key_cache_0.shape[2]
    full = torch.zeros(1, total, dtype=torch.long)
    full[:, :length] = mask
    tokens, all_logits = [], []
    with torch.no_grad():
        logits = wrapped(ids, full[:, :length] if wrapped.written_part else full, torch.arange(length)[None],
                         torch.arange(length))
        for i in range(new):
            token = logits.argmax(-1)
            tokens.append(int(token))
            all_logits.append(logits)
            full[:, length + i] = 1
            attended = full[:, :length + i + 1].clone() if wrapped.written_part else full
            if wrapped.written_part:
                torch._dynamo.mark_dynamic(attended, 1)
            logits = step(token[:, None], attended, torch.tensor([[length + i]]), torch.tensor([length + i]))
    return tokens, all_logits


def first_difference(a: list[int], b: list[int]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)


def print_margins(label: str, tokens: list[int], logits: list[torch.Tensor], eager_tokens: list[int],
                  eager_logits: list[torch.Tensor], eager_margins) -> None:
    """Up to where `tokens` first differ from the eager step's `eager_tokens` (after it the two decode different
    sequences): each step's margin between the two best logits, eager's (of `eager_margins`) and `label`'s, and the
    largest difference `label` makes to the eager step's logits."""
    diverged = first_difference(tokens, eager_tokens)
    for i in range(len(tokens) if diverged is None else diverged + 1):
        difference = float((logits[i].float() - eager_logits[i].float()).abs().max())
        print(f"new token {i}: eager's two best logits {margin(eager_margins[i]):.4f} apart, {label}: "
              f"{margin(logits[i]):.4f}; {label} differs from eager's logits by up to {difference:.4f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--new", type=int, default=32, help="new tokens (default 32)")
    new = parser.parse_args(argv).new
    torch.set_num_threads(1)
    model = decode.llama_1b()
    ids, mask = decode.prompts(1, model.config.vocab_size)
    prompt = ids.shape[1]
    with torch.no_grad():
        eager = model.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False, output_logits=True,
                               return_dict_in_generate=True)
    rows = {"generate (eager, dynamic cache)": eager.sequences[0, prompt:].tolist()}
    wrapped = StaticCacheLM(model, 1, prompt + new).eval()
    rows["static-cache step, eager"], eager_logits = static_cache_decoding(wrapped, wrapped, ids, mask, new)
    compiled = torch.compile(wrapped, fullgraph=True, dynamic=False)
    rows["static-cache step, torch.compile"], compiled_logits = static_cache_decoding(wrapped, compiled, ids, mask,
                                                                                      new)
    # what the port compiles: attention over the positions written, their number a dynamic size
    written = StaticCacheLM(model, 1, prompt + new, written_part=True).eval()
    rows["written part, torch.compile"], _ = static_cache_decoding(written, torch.compile(written, fullgraph=True),
                                                                   ids, mask, new)
    # ... and with the Inductor settings the port gives a half-precision inference program (its matrix-vector
    # products as Inductor's own loops: compiled.HALF_PRECISION_MATVEC_CONFIGS)
    torch._dynamo.reset()
    port_settings = torch.compile(written, fullgraph=True, options=HALF_PRECISION_MATVEC_CONFIGS)
    rows[SETTINGS_ROW], settings_logits = static_cache_decoding(written, port_settings, ids, mask, new)
    for fuse, name in (("compile", "port, fuse='compile'"), (True, "port, fuse=True")):
        lm = aot_ops.from_torch_lm(model, batch_size=1, max_length=prompt + new, fuse=fuse)
        out = aot_ops.generate(lm, to_ms(ids), attention_mask=to_ms(mask), max_new_tokens=new)
        rows[name] = to_torch(out)[0, prompt:].tolist()
    reference = rows["generate (eager, dynamic cache)"]
    for name, tokens in rows.items():
        print(f"{name:<44} first differs from eager at new token {first_difference(tokens, reference)}; "
              f"from torch.compile at {first_difference(tokens, rows['static-cache step, torch.compile'])}, "
              f"from torch.compile of the written part at {first_difference(tokens, rows['written part, torch.compile'])}, "
              f"from the port's Inductor settings at {first_difference(tokens, rows[SETTINGS_ROW])}")
        print(f"    {tokens}")
    eager_step = rows["static-cache step, eager"]
    print_margins("torch.compile", rows["static-cache step, torch.compile"], compiled_logits, eager_step,
                  eager_logits, eager.logits)
    print_margins("the port's Inductor settings", rows[SETTINGS_ROW], settings_logits, eager_step, eager_logits,
                  eager_logits)


if __name__ == "__main__":
    sys.exit(main())
