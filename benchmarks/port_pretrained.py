"""Big checkpoints from their folder: load + port time, peak memory and greedy tokens against torch, by model size;
and LoRA fine-tuning of a ported decoder.

    .venv/bin/python benchmarks/port_pretrained.py [--models llama-1b,qwen2-3b,qwen2-7b] [--root DIR] [--cold]
                                                   [--lora llama-1b] [--plot docs/port_pretrained.png]

Each model is a checkpoint of random weights in bfloat16, written once shard by shard into `--root` (what
save_pretrained writes: safetensors shards and their index; 2 GB, 5.7 GB and 14.2 GB). Each measurement runs in a
fresh process:
- `aot_ops.from_pretrained(folder, max_length=64)` (fuse=True), twice: the model's first port
  (AOT_OPS_PORT_CACHE=0: exported and fused), and a port whose plan an earlier port kept (the port cache,
  aot_ops/_port/plan_cache.py; a port to keep it is run first where there was none). Each: its wall time (the
  model type's transformers modules imported before, timed apart; the model built on the meta
  device, the port, the files read beside it), the resident peak above the process before it, and the private
  (anonymous) memory after it, as multiples of the weights. Nothing of the checkpoint is mapped (it is read into
  the Parameters), so the resident peak is private memory too. `--cold` drops the page cache first (needs root):
  the files then come from the disk.
- 8 greedy tokens after a 12-token prompt (`torch.manual_seed(0)`, `torch.randint(2, 30000, (1, 12))`) with
  aot_ops.generate; then the port is deleted and torch decodes from transformers' own from_pretrained (memory
  mapped), with its dynamic and its static cache. Where the tokens differ, the step's logit margins (best minus
  second best) say whether it is a near tie.
- `--lora`: a peft LoRA adapter (r=8 on q_proj and v_proj, alpha 16, no dropout) on the model from
  aot_ops.load_pretrained (the base frozen, in bfloat16), ported with from_torch(fuse=True, share_weights=True)
  as the language-modelling loss, 3 SGD steps (learning rate 0.01) with aot_ops.train_step, the peak memory
  measured over the port and the steps; then the adapter gradients at the weights reached (ms.grad, after the
  measurement: it compiles a graph of its own), and the same in torch on transformers' own loading with the same
  adapter initialisation: losses and gradients compared (relative distance of the gradients' norms).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from _memory import anonymous_bytes, child_result, reset_peak, status_bytes

MODELS = {  # name -> (config class, config)
    "llama-1b": ("LlamaConfig", dict(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32,
                                     num_key_value_heads=4, intermediate_size=5632, vocab_size=32000,
                                     max_position_embeddings=2048)),
    "qwen2-3b": ("Qwen2Config", dict(hidden_size=2048, num_hidden_layers=36, num_attention_heads=16,
                                     num_key_value_heads=2, intermediate_size=11008, vocab_size=151936,
                                     tie_word_embeddings=True)),
    "qwen2-7b": ("Qwen2Config", dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28,
                                     num_key_value_heads=4, intermediate_size=18944, vocab_size=152064,
                                     tie_word_embeddings=False)),
}
LORA = dict(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
LEARNING_RATE = 0.01


def checkpoint(root: str, name: str) -> str:
    folder = os.path.join(root, name)
    if not os.path.exists(os.path.join(folder, "config.json")):
        import torch
        import transformers

        from aot_ops.tools.random_checkpoint import write_random_checkpoint

        kind, config = MODELS[name]
        start = time.perf_counter()
        write_random_checkpoint(folder, getattr(transformers, kind)(**config), dtype=torch.bfloat16,
                                shard_bytes=1 << 30)
        print(f"{name}: checkpoint written in {time.perf_counter() - start:.0f} s", flush=True)
    return folder


# ---- measured in the child process ---------------------------------------------------------------------------------

def _start_measuring() -> tuple[int, int]:
    import gc

    gc.collect()
    reset_peak()
    return status_bytes("VmRSS"), anonymous_bytes()


def prompt():
    import torch

    torch.manual_seed(0)
    return torch.randint(2, 30000, (1, 12))


def margin(logits) -> float:
    import torch

    top = torch.topk(logits.float().reshape(-1), 2).values
    return float(top[0] - top[1])


def measure_port(folder: str) -> dict:
    import logging

    import torch
    import transformers

    import aot_ops
    import aot_ops._port.lm.kv_cache  # noqa: F401 - imported before the baseline, as a user's process has it
    import aot_ops._port.lm.pretrained  # noqa: F401
    from aot_ops._core.convert import to_ms, to_torch

    torch.set_num_threads(os.cpu_count() or 1)
    phases = {}

    class Phases(logging.Handler):
        def emit(self, record):
            if record.msg.startswith("from_pretrained"):
                phases.update(zip(("built_s", "ported_s", "read_s", "waited_s"), record.args[1:]))

    class PlanKept(logging.Handler):
        def emit(self, record):
            phases["plan_kept"] = phases.get("plan_kept", False) or record.msg.endswith("from the cache")

    logging.getLogger("aot_ops.port").addHandler(Phases())
    logging.getLogger("aot_ops.port").setLevel(logging.INFO)
    logging.getLogger("aot_ops._port.plan_cache").addHandler(PlanKept())
    logging.getLogger("aot_ops._port.plan_cache").setLevel(logging.DEBUG)
    # The model type's transformers modules (configuration, modeling: they import torchvision and torch._dynamo),
    # imported once per process by any loading, torch's too: timed apart
    start = time.perf_counter()
    config = transformers.AutoConfig.from_pretrained(folder)
    transformers.AutoModelForCausalLM._model_mapping[type(config)]
    imports = time.perf_counter() - start
    rss, anonymous = _start_measuring()
    start = time.perf_counter()
    lm = aot_ops.from_pretrained(folder, max_length=64)
    seconds = time.perf_counter() - start
    weights = sum(p.nbytes for p in lm.cell.get_parameters() if "_cache_" not in p.name)
    row = {"weights_GB": weights / 1e9, "from_pretrained_s": seconds, "imports_s": imports, **phases,
           "peak": (status_bytes("VmHWM") - rss) / weights, "private_after": (anonymous_bytes() - anonymous) / weights}
    ids = prompt()
    ours = to_torch(aot_ops.generate(lm, to_ms(ids), max_new_tokens=8))[0, 12:].tolist()
    port_margins = _port_margins(lm, ids, ours)
    del lm
    import gc

    gc.collect()
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    references = {}
    for cache in ("dynamic", "static"):
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False,
                                 pad_token_id=0, output_logits=True, return_dict_in_generate=True,
                                 **({"cache_implementation": "static"} if cache == "static" else {}))
        references[cache] = (out.sequences[0, 12:].tolist(), [margin(step) for step in out.logits])
    row.update(tokens=ours, torch_dynamic=references["dynamic"][0], torch_static=references["static"][0])
    first = next((k for k, (a, b) in enumerate(zip(ours, references["dynamic"][0])) if a != b), None)
    if first is not None:
        row.update(first_difference=first, port_margin=port_margins[first],
                   torch_margin=references["dynamic"][1][first])
    return row


def _port_margins(lm, ids, tokens) -> list[float]:
    """The port's logit margin at each step of the greedy decoding that gave `tokens`."""
    return [margin(logits) for logits in port_step_logits(lm, ids, tokens)]


def port_step_logits(lm, ids, tokens) -> list:
    """The port's logits at each step of the greedy decoding that gave `tokens` (the same calls generate makes: the
    prompt, then one token at a time); the cell answers the last position's."""
    import torch

    from aot_ops._core.convert import to_ms, to_torch

    length = ids.shape[1]
    mask = torch.zeros(1, lm.max_length, dtype=torch.long)
    mask[:, :length] = 1
    x, positions, cache_positions = ids, torch.arange(length)[None], torch.arange(length)
    steps = []
    for step, token in enumerate(tokens):
        steps.append(to_torch(lm.cell(to_ms(x), to_ms(mask), to_ms(positions), to_ms(cache_positions))))
        n = length + step
        mask[:, n] = 1
        x, positions, cache_positions = torch.tensor([[token]]), torch.tensor([[n]]), torch.tensor([n])
    return steps


def measure_lora(folder: str, steps: int = 3) -> dict:
    import mindspore as ms
    import peft
    import torch
    import transformers

    import aot_ops
    import aot_ops._port.lm.pretrained  # noqa: F401
    from aot_ops._core.convert import to_ms, to_torch
    from aot_ops.testing import LanguageModellingLoss

    torch.set_num_threads(os.cpu_count() or 1)
    ids = torch.randint(2, 30000, (1, 16), generator=torch.Generator().manual_seed(1))
    config = transformers.AutoConfig.from_pretrained(folder)
    __import__(f"transformers.models.{config.model_type}.modeling_{config.model_type}")
    rss, anonymous = _start_measuring()
    start = time.perf_counter()
    model = aot_ops.load_pretrained(folder, dtype=torch.bfloat16)
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    torch.manual_seed(0)
    adapted = peft.get_peft_model(model, peft.LoraConfig(**LORA))
    loaded = time.perf_counter()
    cell = aot_ops.from_torch(LanguageModellingLoss(adapted).train(), (ids,), fuse=True, input_grads=False,
                              share_weights=True)
    ported = time.perf_counter()
    step = aot_ops.train_step(cell, ms.nn.SGD(cell.trainable_params(), learning_rate=LEARNING_RATE))
    losses = [float(step(to_ms(ids)).asnumpy()) for _ in range(steps)]
    row = {"weights_GB": weights / 1e9, "load_s": loaded - start, "port_s": ported - loaded,
           "trainable": len(cell.trainable_params()), "peak": (status_bytes("VmHWM") - rss) / weights,
           "private_after": (anonymous_bytes() - anonymous) / weights, "losses": losses}
    # After the measurement: MindSpore's ms.grad compiles a graph of its own, with buffers of its own
    before_steps = cell.trainable_params()
    gradients = ms.grad(cell, grad_position=None, weights=before_steps)(to_ms(ids))
    first_gradients = {p.name: to_torch(g).float() for p, g in zip(before_steps, gradients)}
    del cell, step, adapted, model
    import gc

    gc.collect()
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    torch.manual_seed(0)
    reference = LanguageModellingLoss(peft.get_peft_model(reference, peft.LoraConfig(**LORA))).train()
    trainable = [(n, p) for n, p in reference.named_parameters() if p.requires_grad]
    optimizer = torch.optim.SGD([p for _, p in trainable], lr=LEARNING_RATE)
    torch_losses = []
    for k in range(steps + 1):
        optimizer.zero_grad()
        loss = reference(ids)
        loss.backward()
        if k == steps:  # the gradients at the weights both sides reached (the port's were taken after its steps)
            worst = max(float((first_gradients[n].reshape(p.grad.shape) - p.grad.float()).norm() /
                              p.grad.float().norm().clamp_min(1e-30)) for n, p in trainable)
            break
        optimizer.step()
        torch_losses.append(float(loss))
    row.update(torch_losses=torch_losses, gradient_rel_diff=worst,
               loss_rel_diff=max(abs(a - b) / abs(b) for a, b in zip(losses, torch_losses)))
    return row


# ---- the parent ----------------------------------------------------------------------------------------------------

def run_child(kind: str, folder: str, cold: bool, **environment: str) -> dict | None:
    if cold:
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as caches:
            caches.write("3")
    return child_result(__file__, ["--child", kind, folder], folder, **environment)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="llama-1b,qwen2-3b,qwen2-7b")
    parser.add_argument("--lora", default="", help="models to fine-tune with a LoRA adapter (e.g. llama-1b)")
    parser.add_argument("--root", default="/tmp/aot_ops-checkpoints")
    parser.add_argument("--cold", action="store_true", help="drop the page cache before each measurement (root)")
    parser.add_argument("--plot", metavar="PNG")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "FOLDER"), help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        kind, folder = options.child
        row = measure_port(folder) if kind == "port" else measure_lora(folder)
        print("RESULT " + json.dumps(row), flush=True)
        return 0
    print(f"load average {os.getloadavg()[0]:.2f}; memory as multiples of the weights, above the process before "
          f"loading; {'page cache dropped before each run' if options.cold else 'page cache as it is'}")
    rows = []
    for name in [m for m in options.models.split(",") if m]:
        folder = checkpoint(options.root, name)
        # The first port of a model (its plan neither read nor kept), then a port whose plan an earlier one kept
        first = run_child("port", folder, options.cold, AOT_OPS_PORT_CACHE="0")
        kept = run_child("port", folder, options.cold)
        if kept is not None and not kept.get("plan_kept"):
            kept = run_child("port", folder, options.cold)  # that one made the plan; this one reads it
        if first is None or kept is None:
            continue
        rows.append({"model": name, "first": first, "kept": kept})
        for label, row in (("first port", first), ("plan kept", kept)):
            _print_port(name, label, row)
    for name in [m for m in options.lora.split(",") if m]:
        row = run_child("lora", checkpoint(options.root, name), options.cold)
        if row is None:
            continue
        losses, torch_losses = ([round(v, 4) for v in row[key]] for key in ("losses", "torch_losses"))
        print(f"{name} LoRA: load {row['load_s']:.1f} s, port {row['port_s']:.1f} s, {row['trainable']} adapter "
              f"tensors; losses {losses} torch {torch_losses} (worst relative {row['loss_rel_diff']:.1e}); adapter "
              f"gradients after the steps within {row['gradient_rel_diff']:.1e} of torch's (norm); peak "
              f"{row['peak']:.2f}x, private after {row['private_after']:.2f}x", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    if options.plot and rows:
        plot(options.plot, rows)
    return 0


def _print_port(name: str, label: str, row: dict) -> None:
    same = row["tokens"] == row["torch_dynamic"]
    tie = "" if same else (f" (step {row['first_difference'] + 1}: port margin {row['port_margin']:.4f}, "
                           f"torch margin {row['torch_margin']:.4f})")
    print(f"{name} ({label}): {row['weights_GB']:.1f} GB, from_pretrained {row['from_pretrained_s']:.1f} s "
          f"(built {row.get('built_s', 0):.1f} s, ported {row.get('ported_s', 0):.1f} s, read "
          f"{row.get('read_s', 0):.1f} s beside it; the model type's imports before it "
          f"{row['imports_s']:.1f} s), peak {row['peak']:.2f}x, private after "
          f"{row['private_after']:.2f}x; tokens {'equal' if same else 'DIFFER'} torch's{tie}; "
          f"torch static {'equal' if row['torch_static'] == row['tokens'] else row['torch_static']}", flush=True)


def plot(path: str, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(rows, key=lambda r: r["kept"]["weights_GB"])
    sizes = [r["kept"]["weights_GB"] for r in rows]
    first, kept = [r["first"] for r in rows], [r["kept"] for r in rows]
    figure, (memory, seconds) = plt.subplots(1, 2, figsize=(10, 4))
    memory.plot(sizes, [r["peak"] for r in first], "o-", label="resident peak (private: nothing mapped)")
    memory.plot(sizes, [r["private_after"] for r in first], "s--", label="private after the port")
    memory.axhline(1.0, color="grey", linewidth=0.8)
    memory.set(xlabel="weights (GB, bfloat16)", ylabel="x the weights", title="from_pretrained: memory (first port)")
    memory.legend()
    seconds.plot(sizes, [r["from_pretrained_s"] for r in first], "o-", label="folder to ported LM, first port")
    seconds.plot(sizes, [r["from_pretrained_s"] for r in kept], "o-", label="folder to ported LM, plan kept")
    seconds.plot(sizes, [r.get("ported_s", 0) for r in first], "s--", label="export + fuse + cell (first port)")
    seconds.plot(sizes, [r.get("read_s", 0) for r in kept], "^:", label="weights read (plan kept)")
    seconds.plot(sizes, [3 * s / 2 for s in sizes], color="grey", linewidth=0.8, label="3 s per billion")
    seconds.set(xlabel="weights (GB, bfloat16)", ylabel="seconds", title="from_pretrained: time")
    seconds.legend(fontsize=7)
    rows = [dict(r["kept"], model=r["model"]) for r in rows]
    for axis, row_names in ((memory, rows), (seconds, rows)):
        for r in row_names:
            axis.annotate(r["model"], (r["weights_GB"], axis.get_ylim()[0]), fontsize=7, ha="center")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
