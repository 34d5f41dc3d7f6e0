"""Peak memory of a training step, ported against torch eager, each case in a fresh process.

    .venv/bin/python benchmarks/training_memory.py [--tokens 512] [--cases torch,value_and_grad,train_step]
                                                   [--checkpointing] [--layers 8] [--steps 3] [--plot F.png]
                                                   [--model llama|resnet50|llama-1b-lora] [--fuse true|compile]
    .venv/bin/python benchmarks/training_memory.py --account [--model resnet50]  # what the forward saves, per tensor

The model is a transformers Llama (8 layers, width 512, MLP 1376, 8 heads / 4 key-value heads, vocabulary 2000,
eager attention, float32, random weights), batch 4 x --tokens tokens, its loss from `model(input_ids=ids,
labels=ids, use_cache=False).loss` in a wrapper module, --steps SGD steps (lr 0.01). `--checkpointing`: the model
asks for activation checkpointing itself (`gradient_checkpointing_enable(use_reentrant=False)`), as a user
fine-tuning at long sequences does; `--autocast`: the loss computed under bfloat16 autocast over the float32
weights (mixed precision as torch users train). `--model resnet50`: torchvision's ResNet-50 instead (batch 8 x 3 x
224 x 224, cross-entropy over 1,000 classes, batch norm training; `--checkpointing` checkpoints each of its four
stages with torch.utils.checkpoint). `--model llama-1b-lora`: a 1.1B Llama in bfloat16 fine-tuned with LoRA (peft,
rank 16 on the attention projections, batch 1 x --tokens; only the adapters train, SGD with momentum over float32
masters as below). `--weights bfloat16`: the weights in bfloat16, the optimizer SGD with momentum 0.9
over float32 master weights (its state float32), in torch and MindSpore alike. Cases:
- torch: torch eager, `loss.backward()` + `torch.optim.SGD`;
- value_and_grad: `aot_ops.from_torch(wrapper, (ids, labels), fuse=True, input_grads=False)`, PyNative,
  `ms.value_and_grad` + `nn.SGD`;
- train_step: the same port, `aot_ops.train_step` (the whole step as one graph);
- graph_train_one_step: the same port in GRAPH_MODE, `nn.TrainOneStepCell(cell, nn.SGD)`;
with `--fuse compile`, the ports are `fuse="compile"` (their programs compiled by AOTInductor).

Peak = the process's peak resident memory during the steps above what it held before them: the kernel's peak
counter (VmHWM) is reset by writing 5 to /proc/self/clear_refs after the warm-up set-up, and read after the steps.
Each case runs in its own process (a fresh allocator); the losses are printed with the figures, to check that the
cases computed the same thing. Each case's peak is also given by phase of the step (PhaseSampler: resident memory
sampled every millisecond): where in the step the memory is held.

`--account`: the tensors the forward keeps for the backward, by size: torch's eager autograd (every tensor its
saved-tensor hooks see, each storage once) against the forward graph AOTAutograd partitions out of the exported
graph (the extra outputs a fused port's forward program hands its backward program), with AOTAutograd's default
partition and torch.compile's min-cut partition (what a fused port uses, compiled or not), for
the same model and batch. Weights the backward reads (a linear's transposed weight) count in every column.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from _memory import reset_peak, status_bytes

CASES = ("torch", "value_and_grad", "train_step", "graph_train_one_step")


def _llama(layers: int, tokens: int, checkpointing: bool, **shape):
    """A transformers LlamaForCausalLM of `shape` with random weights (seed 0), without a cache, the model's own
    activation checkpointing on with `checkpointing`."""
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(num_hidden_layers=layers, max_position_embeddings=max(2048, tokens),
                                      use_cache=False, **shape)
    model = transformers.LlamaForCausalLM(config)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def _token_ids(batch: int, tokens: int, vocabulary: int) -> torch.Tensor:
    return torch.randint(0, vocabulary, (batch, tokens), generator=torch.Generator().manual_seed(1))


def build_llama(layers: int, tokens: int, checkpointing: bool, autocast: bool = False):
    model = _llama(layers, tokens, checkpointing, vocab_size=2000, hidden_size=512, intermediate_size=1376,
                   num_attention_heads=8, num_key_value_heads=4, attn_implementation="eager")
    model.train()
    ids = _token_ids(4, tokens, 2000)
    return LossOf(model, causal_lm_loss, autocast), (ids, ids)


def build_llama_lora(layers: int, tokens: int, checkpointing: bool, autocast: bool = False):
    """A 1.1B Llama (TinyLlama's shape: width 2048, MLP 5632, 32 heads / 4 key-value heads, vocabulary 32000, torch's
    scaled-dot-product attention; 22 layers, or --layers) in bfloat16 with random weights, fine-tuned with LoRA
    (peft: rank 16 on the four attention projections, the adapters in bfloat16 too), batch 1 x --tokens tokens. Only
    the adapters train: the base is frozen."""
    import peft

    model = _llama(layers, tokens, checkpointing, vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                   num_attention_heads=32, num_key_value_heads=4, attn_implementation="sdpa").to(torch.bfloat16)
    lora = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                           target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    model = peft.get_peft_model(model, lora, autocast_adapter_dtype=False)  # adapters in the base's bfloat16
    model.train()
    ids = _token_ids(1, tokens, 32000)
    return LossOf(model, causal_lm_loss, autocast), (ids, ids)


def build_resnet50(checkpointing: bool, autocast: bool = False, batch: int = 8):
    """torchvision's ResNet-50 (random weights, batch norm training), batch x 3 x 224 x 224 images, cross-entropy
    over 1,000 classes; `checkpointing`: each of its four stages checkpointed (torch.utils.checkpoint, as
    `checkpoint_sequential` users do)."""
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50()
    if checkpointing:
        for name in ("layer1", "layer2", "layer3", "layer4"):
            setattr(model, name, Checkpointed(getattr(model, name)))
    model.train()
    gen = torch.Generator().manual_seed(1)
    images = torch.randn(batch, 3, 224, 224, generator=gen)
    labels = torch.randint(0, 1000, (batch,), generator=gen)
    return LossOf(model, classifier_loss, autocast), (images, labels)


def build(model: str, layers: int, tokens: int, checkpointing: bool, autocast: bool = False):
    """(loss module, its inputs) of the benchmark's --model."""
    if model == "resnet50":
        return build_resnet50(checkpointing, autocast)
    if model == "llama-1b-lora":
        return build_llama_lora(layers, tokens, checkpointing, autocast)
    return build_llama(layers, tokens, checkpointing, autocast)


class Checkpointed(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(self.inner, x, use_reentrant=False)


def causal_lm_loss(model, ids, labels):
    return model(input_ids=ids, labels=labels, use_cache=False).loss


def classifier_loss(model, images, labels):
    return torch.nn.functional.cross_entropy(model(images).float(), labels)  # .float(): float32 already, or autocast's


class LossOf(torch.nn.Module):
    """`loss(model, inputs, labels)` as a module, under bfloat16 autocast with `autocast`."""

    def __init__(self, model, loss, autocast: bool = False):
        super().__init__()
        self.model, self.loss, self.autocast = model, loss, autocast

    def forward(self, inputs, labels):
        # mixed precision as torch users train: float32 weights, the computation in bfloat16 where autocast says.
        # Not entered at all without it: even disabled, autocast is a region of the exported graph, whose inlining
        # drops the checkpoint marks of the layers inside (docs/porting.md#activation-checkpointing)
        if not self.autocast:
            return self.loss(self.model, inputs, labels)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return self.loss(self.model, inputs, labels)


class PhaseSampler:
    """Resident memory sampled every millisecond on a thread of its own, each sample labelled with the phase of
    the step the main thread is in: torch's forward, backward and optimizer; for a port, which program ran last
    (aot_ops.program_launches(): the forward program, then the backward program, then the rest of the step)."""

    def __init__(self, launches=None):
        import threading

        self.phase, self._launches = "before", launches
        self.peaks: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self):
        self._launches_at_start = self._launches() if self._launches else 0
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _sample(self):
        while not self._stop.wait(0.001):
            phase = self.phase
            if self._launches is not None:
                # wait=False: waiting for PyNative's queue at each sample would synchronize the training thread
                # (a port called operator by operator measured up to 2x slower observed than unobserved)
                launched = self._launches(wait=False) - self._launches_at_start
                phase = "step start" if launched == 0 else ("forward program" if launched % 2 else
                                                           "backward program and after")
            rss = status_bytes("VmRSS")
            self.peaks[phase] = max(self.peaks.get(phase, 0), rss)


class MasterWeightsSGD(torch.optim.Optimizer):
    """torch: SGD with momentum over float32 master copies of bfloat16 parameters (the gradients cast up, the
    step taken in float32, the parameters rounded from the masters), as mixed-precision trainers keep them."""

    def __init__(self, params, lr: float, momentum: float):
        self.params = list(params)
        self.masters = [p.detach().float() for p in self.params]
        self.inner = torch.optim.SGD(self.masters, lr=lr, momentum=momentum)

    def zero_grad(self, set_to_none: bool = True):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        for p, m in zip(self.params, self.masters):
            m.grad = p.grad.float()
            p.grad = None
        self.inner.step()
        for p, m in zip(self.params, self.masters):
            p.copy_(m)


def ms_master_weights_sgd(params, lr: float, momentum: float):
    """MindSpore: the same optimizer as an nn.Optimizer (usable by train_step and TrainOneStepCell)."""
    import mindspore as ms

    update = ms.ops.MultitypeFuncGraph("master_weights_update")

    @update.register("Tensor", "Number", "Tensor", "Tensor", "Tensor", "Tensor")
    def _(lr, momentum, grad, master, moment, param):
        moment = ms.ops.assign(moment, moment * momentum + grad.astype(ms.float32))
        master = ms.ops.assign(master, master - lr * moment)
        # Parameter.copy_, not assign: MindSpore's CPU Assign has no bfloat16 kernel (docs/mindspore-notes.md)
        return param.copy_(master.astype(param.dtype))

    class MasterWeightsSGDCell(ms.nn.Optimizer):
        def __init__(self):
            super().__init__(lr, params)
            self.masters = ms.ParameterTuple([ms.Parameter(p.astype(ms.float32), name=f"master.{p.name}")
                                              for p in self.parameters])
            self.moments = ms.ParameterTuple([ms.Parameter(ms.ops.zeros(p.shape, ms.float32), name=f"moment.{p.name}")
                                              for p in self.parameters])
            self.momentum = momentum
            self.map = ms.ops.HyperMap()

        def construct(self, gradients):
            return self.map(ms.ops.partial(update, self.get_lr(), self.momentum), gradients, self.masters,
                            self.moments, self.parameters)

    return MasterWeightsSGDCell()


def run_case(case: str, model: str, layers: int, tokens: int, steps: int, checkpointing: bool,
             autocast: bool, weights: str = "float32", fuse: bool | str = True) -> dict:
    wrapper, inputs = build(model, layers, tokens, checkpointing, autocast)
    if weights == "bfloat16":  # bfloat16 weights, float32 master weights and momentum in the optimizer
        wrapper.to(torch.bfloat16)
        inputs = tuple(t.to(torch.bfloat16) if t.is_floating_point() else t for t in inputs)
    losses, times = [], []
    if case == "torch":
        trained = [p for p in wrapper.parameters() if p.requires_grad]  # a LoRA model's adapters only
        optimizer = (MasterWeightsSGD(trained, lr=0.01, momentum=0.9) if weights == "bfloat16" else
                     torch.optim.SGD(trained, lr=0.01))
        reset_peak()
        start_rss = status_bytes("VmRSS")
        with PhaseSampler() as phases:
            for _ in range(steps):
                times.append(time.perf_counter())
                optimizer.zero_grad(set_to_none=True)
                phases.phase = "forward"
                loss = wrapper(*inputs)
                phases.phase = "backward"
                loss.backward()
                phases.phase = "optimizer"
                optimizer.step()
                losses.append(float(loss))
    else:
        import mindspore as ms

        import aot_ops
        from aot_ops._core.convert import to_ms

        ms.set_context(mode=ms.GRAPH_MODE if case == "graph_train_one_step" else ms.PYNATIVE_MODE)
        cell = aot_ops.from_torch(wrapper, inputs, fuse=fuse, input_grads=False)
        cell.set_train(True)
        optimizer = (ms_master_weights_sgd(cell.trainable_params(), 0.01, 0.9) if weights == "bfloat16" else
                     ms.nn.SGD(cell.trainable_params(), learning_rate=0.01))
        ms_inputs = [to_ms(t) for t in inputs]
        if case == "train_step":
            step = aot_ops.train_step(cell, optimizer)
        elif case == "graph_train_one_step":
            step = ms.nn.TrainOneStepCell(cell, optimizer)
            step.set_train(True)
        else:
            grad_fn = ms.value_and_grad(cell, None, optimizer.parameters)

            def step(*inputs):
                loss, grads = grad_fn(*inputs)
                optimizer(grads)
                return loss
        reset_peak()
        start_rss = status_bytes("VmRSS")
        with PhaseSampler(aot_ops.program_launches) as phases:
            for _ in range(steps):
                times.append(time.perf_counter())
                losses.append(float(step(*ms_inputs).asnumpy()))
    times.append(time.perf_counter())
    durations = [b - a for a, b in zip(times, times[1:])]
    # the first step compiles (MindSpore's graphs) or warms up (torch's allocator): the others are the step's time
    seconds = statistics.median(durations[1:] or durations)
    return {"case": case, "peak_gb": (status_bytes("VmHWM") - start_rss) / 1e9, "losses": losses,
            "step_s": seconds, "held_before_gb": start_rss / 1e9,
            "phases_gb": {k: (v - start_rss) / 1e9 for k, v in phases.peaks.items()}}


def saved_by_torch(model: str, layers: int, tokens: int, checkpointing: bool) -> dict[str, int]:
    """Bytes of the tensors eager autograd keeps for the backward, each storage once, by dtype and shape."""
    wrapper, inputs = build(model, layers, tokens, checkpointing)
    seen, sizes = set(), {}

    def pack(t):
        key = (t.untyped_storage().data_ptr(), t.dtype)
        if key not in seen and not isinstance(t, torch.nn.Parameter):
            seen.add(key)
            label = f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"
            sizes[label] = sizes.get(label, 0) + t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        wrapper(*inputs)
    return sizes


def saved_by_partition(model: str, layers: int, tokens: int, checkpointing: bool, partition: str) -> dict[str, int]:
    """Bytes of the values the forward graph hands the backward graph when AOTAutograd partitions the exported
    graph with `partition` ("default": AOTAutograd's; "min_cut": torch.compile's, what
    a fused port uses, aot_ops/_port/programs/fused.py), by dtype and shape. These are the forward program's extra outputs in a fused port."""
    from functorch.compile import aot_module, default_partition, min_cut_rematerialization_partition

    wrapper, inputs = build(model, layers, tokens, checkpointing)
    exported = torch.export.export(wrapper, inputs).module()
    partition_fn = {"default": default_partition, "min_cut": min_cut_rematerialization_partition}[partition]
    sizes = {}

    def forward_compiler(gm, _inputs):
        outputs = gm.graph.output_node().args[0]
        for node in outputs[1:]:  # the loss first, then what the backward takes
            value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
            if isinstance(value, torch.Tensor):
                label = f"{str(value.dtype).replace('torch.', '')}{list(value.shape)}"
                sizes[label] = sizes.get(label, 0) + value.numel() * value.element_size()
        return gm

    compiled = aot_module(exported, fw_compiler=forward_compiler, bw_compiler=lambda gm, _: gm,
                          partition_fn=partition_fn)
    compiled(*inputs).backward()
    return sizes


def _table(columns: dict[str, dict[str, int]]) -> str:
    names = list(columns)
    rows = ["| saved tensor (dtype, shape) | " + " | ".join(f"{n} MB" for n in names) + " |",
            "|---|" + "---:|" * len(names)]
    labels = set().union(*columns.values())
    for label in sorted(labels, key=lambda k: -max(c.get(k, 0) for c in columns.values())):
        rows.append(f"| {label} | " + " | ".join(f"{columns[n].get(label, 0) / 1e6:.1f}" for n in names) + " |")
    rows.append("| **all** | " + " | ".join(f"{sum(columns[n].values()) / 1e6:.1f}" for n in names) + " |")
    return "\n".join(rows)


def plot(path: str, title: str, results: dict[str, dict]) -> None:
    """Each case's peak, split into the phases of its step (the highest phase on top), as bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(results)
    figure, axes = plt.subplots(figsize=(7, 3.6))
    axes.bar(cases, [results[c]["peak_gb"] for c in cases], color=["#888888"] + ["#3a78b5"] * (len(cases) - 1))
    for k, case in enumerate(cases):
        axes.text(k, results[case]["peak_gb"], f"{results[case]['peak_gb']:.2f} GB\n"
                  f"{results[case]['step_s']:.2f} s/step", ha="center", va="bottom", fontsize=8)
    axes.set_ylabel("peak above before the steps (GB)")
    axes.set_title(title, fontsize=9)
    axes.set_ylim(0, max(r["peak_gb"] for r in results.values()) * 1.25)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("llama", "resnet50", "llama-1b-lora"), default="llama")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--layers", type=int, help="decoder layers (default: 8; llama-1b-lora: 22)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--autocast", action="store_true", help="bfloat16 autocast over float32 weights")
    parser.add_argument("--weights", choices=("float32", "bfloat16"), default="float32",
                        help="bfloat16: the weights in bfloat16, SGD with momentum over float32 master weights")
    parser.add_argument("--fuse", choices=("true", "compile"), default="true",
                        help="compile: the ports' programs compiled by AOTInductor (fuse=\"compile\")")
    parser.add_argument("--account", action="store_true")
    parser.add_argument("--plot", help="write the peaks as a bar chart to this file (PNG)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a case in this process (the parent starts these)
    args = parser.parse_args()
    if args.layers is None:
        args.layers = 22 if args.model == "llama-1b-lora" else 8
    if args.model == "llama-1b-lora":  # a bfloat16 model: its adapters' optimizer keeps float32 masters
        args.weights = "bfloat16"
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if args.one:
        print(json.dumps(run_case(args.one, args.model, args.layers, args.tokens, args.steps, args.checkpointing,
                                  args.autocast, args.weights, True if args.fuse == "true" else args.fuse)))
        return
    if args.account:
        print(_table({"torch eager": saved_by_torch(args.model, args.layers, args.tokens, args.checkpointing),
                      **{f"AOTAutograd {p}": saved_by_partition(args.model, args.layers, args.tokens, args.checkpointing, p)
                         for p in ("default", "min_cut")}}))
        return
    subject = {"resnet50": "ResNet-50, batch 8 x 224 x 224",
               "llama-1b-lora": f"Llama 1.1B shape, {args.layers} layers, LoRA rank 16, batch 1 x {args.tokens} tokens",
               }.get(args.model, f"Llama {args.layers} layers, batch 4 x {args.tokens} tokens")
    precision = ("bfloat16 weights, float32 master weights and momentum" if args.weights == "bfloat16" else
                 "float32")
    title = (f"{subject}, {precision}, {args.steps} SGD steps, {'compiled' if args.fuse == 'compile' else 'fused'} ports, "
             f"checkpointing {'on' if args.checkpointing else 'off'}{', bfloat16 autocast' if args.autocast else ''}")
    print(f"{title}; uptime: {os.getloadavg()}")
    results = {}
    for case in args.cases.split(","):
        cmd = [sys.executable, __file__, "--one", case, "--model", args.model, "--tokens", str(args.tokens),
               "--layers", str(args.layers),
               "--steps", str(args.steps)] + (["--checkpointing"] if args.checkpointing else []) \
            + (["--autocast"] if args.autocast else []) + ["--weights", args.weights, "--fuse", args.fuse]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{case}: failed\n{proc.stderr[-3000:]}")
            continue
        results[case] = json.loads(proc.stdout.strip().splitlines()[-1])
    base = results.get("torch", {}).get("peak_gb")
    print("| case | peak GB above before | vs torch | step s (median after the first) | losses |")
    print("|---|---:|---:|---:|---|")
    for case, r in results.items():
        ratio = f"{r['peak_gb'] / base:.2f}x" if base else "-"
        print(f"| {case} | {r['peak_gb']:.2f} | {ratio} | {r['step_s']:.2f} | "
              f"{', '.join(f'{v:.5f}' for v in r['losses'])} |")
    if args.plot and results:
        plot(args.plot, title, results)
    print("\nPeak resident memory above before the steps, by phase of the step (sampled every millisecond):")
    for case, r in results.items():
        print(f"- {case}: " + ", ".join(f"{phase} {gb:.2f} GB" for phase, gb in r["phases_gb"].items()))


if __name__ == "__main__":
    main()
