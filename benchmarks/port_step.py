"""Training-step time of a PyTorch network ported with aot_ops.from_torch, against torch eager (CPU).

    .venv/bin/python benchmarks/port_step.py [--threads 1] [--steps 100] [--repeat 1] [--net transformer|resnet]
    .venv/bin/python benchmarks/port_step.py --steps 40 --repeat 5      # steadiness: 5 blocks of 40 steps
    .venv/bin/python benchmarks/port_step.py --plot docs/port_step.png [--batches 4,8,16,32,64] [--steps 8]

The network: nn.TransformerEncoderLayer (d_model 64, 4 heads, feed-forward 128, dropout 0) and a linear classifier
over the sequence mean, batch 32, sequence 16, cross-entropy loss. One step is forward + backward + SGD update,
on the same data in both frameworks. MindSpore runs it as `ms.value_and_grad` + `nn.SGD`, in PyNative and in
GRAPH_MODE, on cells ported with `input_grads=False` (torch's step computes no gradient for the input either):
per node (fuse=False), fused (fuse=True: two program calls a step) and compiled (fuse="compile": the same two
calls running the graphs AOTInductor compiled; the packages come from the build cache after the first run).
PyNative rows: the plain loop a user writes, with no ms.jit of their own, on the ported cell as it comes (one
MindSpore graph per call: from_torch's default jit=True); ", per call": the same loop with from_torch(jit=False),
the cell run operator by operator through PyNative; ", train_step": aot_ops.train_step, the whole step as one
graph. In GRAPH_MODE the step is one `ms.jit` function (forward, backward and SGD in one graph), as MindSpore
writes its own training steps; the "GRAPH, fused, 2 jit" row calls value_and_grad and the optimizer as two graphs
instead. `--repeat N` measures N blocks of --steps steps and prints each block's median: PyNative's pipeline can
turn slow for whole stretches of steps.
torch's intra-op threads (also used by the bridged ATen kernels and the compiled programs, which run in this
process) are set by --threads. Prints the median step time over the measured steps (after warm-up steps, which
include GRAPH_MODE's compilation and torch.compile's), the ratio to torch eager ("vs torch") and to torch.compile
("vs compile": torch's step with the model compiled by torch.compile, Inductor's defaults, the optimizer eager),
the aot calls per step: per node (forward + backward launches of the generic ATen entry) or per graph (launches
of the program entry), and for the fused rows the time spent inside the two program launches (the ATen work; the
rest of the step is MindSpore's: autograd, SGD, dispatch). `--net resnet`: the tests' ResNet (torchvision's
layout, BatchNorm) at batch 8, 3x64x64, instead of the transformer. `--plot`: the same measurement at several
batch sizes, drawn as step time against batch size (log-log) into a PNG.

The "no work" rows run the same fused step (as the row's name says) on a stand-in network that holds the same
parameters and only sums them: what MindSpore's value_and_grad + nn.SGD and the two aot calls cost without the
network's work, the floor under the fused rows; "PyNative, native cell, no work" is the same stand-in written as a
MindSpore Cell (no port, no aot call) in the plain PyNative loop: MindSpore's own floor. "torch, AOT graphs" is
torch's step with the model run through the forward and backward graphs
AOTAutograd makes (those the fused programs execute), eagerly from Python. `--thread-times` shows per thread how
long it ran and how long it waited runnable for a CPU: MindSpore's pipeline threads wait for work by spinning,
which on a machine with few cores takes the CPU from the thread that runs the kernels. `--dispatch-threads N` sets
`ms.runtime.dispatch_threads_num(N)` first (MindSpore's default is 5, capped at the core count).
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time

import mindspore as ms
import torch
from mindspore import nn as msnn

import aot_ops
from aot_ops._core.convert import to_ms

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from torch_nets import ResNet, TransformerClassifier, WithLoss  # noqa: E402

BATCH, SEQ, D_MODEL, CLASSES = 32, 16, 64, 10
# Steps run before measuring: GRAPH_MODE's compilation, and MindSpore's pipeline, which ran some of its first ~15
# steps 2-3x slower than later ones (a ported ResNet in GRAPH_MODE: 16 ms per step for steps 6-14, then 5.7 ms).
WARMUP = 20
CNN_SHAPE = (8, 3, 64, 64)


def data(count, shape, classes):
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(*shape, generator=gen), torch.randint(0, classes, (shape[0],), generator=gen))
            for _ in range(count)]


def torch_steps(model, batches):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for x, target in batches:
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = model(x, target)
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return times, loss.item()


def torch_aot_steps(model, batches):
    """torch_steps with the model run through AOTAutograd's forward and backward graphs (the graphs fuse=True's
    programs execute), eagerly from Python: what those graphs cost in torch itself."""
    from functorch.compile import aot_module, make_boxed_func
    from torch._functorch.partitioners import default_partition

    def eager(graph, _inputs):
        return make_boxed_func(graph)

    wrapped = aot_module(model, fw_compiler=eager, bw_compiler=eager, partition_fn=default_partition)
    return torch_steps(wrapped, batches)


def torch_compiled_steps(model, batches):
    """torch_steps with the model compiled by torch.compile (Inductor, its default settings): torch's own way of
    running fused kernels. The first steps compile (within the warm-up)."""
    torch._dynamo.reset()  # a fresh start: Dynamo would otherwise compile a second batch size with dynamic shapes
    return torch_steps(torch.compile(model), batches)


def thread_clock() -> dict[str, tuple[int, int]]:
    """Per thread of this process (name:tid): (nanoseconds run on a CPU, nanoseconds spent runnable but waiting for
    one), from Linux's /proc/self/task/*/schedstat; {} where that is not readable."""
    clocks = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return clocks
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm, open(f"/proc/self/task/{tid}/schedstat") as stat:
                run, wait, _slices = map(int, stat.read().split())
                clocks[f"{comm.read().strip()}:{tid}"] = (run, wait)
        except (OSError, ValueError):
            continue
    return clocks


def thread_times(before, after, steps) -> dict[str, tuple[float, float]]:
    """Thread name -> (ms run, ms waiting for a CPU) per step between two thread_clock() readings, for the threads
    that ran at least 0.1 ms per step (threads of the same name added up)."""
    per_name: dict[str, list[float]] = {}
    for key, (run, wait) in after.items():
        run0, wait0 = before.get(key, (0, 0))
        totals = per_name.setdefault(key.rsplit(":", 1)[0], [0.0, 0.0])
        totals[0] += (run - run0) / 1e6 / steps
        totals[1] += (wait - wait0) / 1e6 / steps
    return {name: (run, wait) for name, (run, wait) in per_name.items() if run >= 0.1}


def launches():
    forward, backward = aot_ops.aten_launches()
    return forward, backward, aot_ops.program_launches(), aot_ops.program_seconds()


def mindspore_steps(model, batches, mode, fuse, loop="plain", jit=True):
    """MindSpore's training steps on the ported model. `loop`: "plain" is the loop a user writes
    (ms.value_and_grad + the optimizer; in GRAPH_MODE one ms.jit function, as MindSpore writes its own GRAPH_MODE
    steps), "2 jit" calls value_and_grad and the optimizer as two graphs (GRAPH_MODE), "train_step" is
    aot_ops.train_step (the whole step as one graph, also in PyNative). `jit=False` ports with from_torch(jit=False):
    in PyNative the cell then runs operator by operator through PyNative's queues instead of as one graph."""
    ms.set_context(mode=mode)
    # The input does not require grad in torch's step either: no gradient for it (the ResNet's first convolution's
    # input gradient costs 1 ms).
    cell = aot_ops.from_torch(model, batches[0], fuse=fuse, input_grads=False, jit=jit)
    optimizer = msnn.SGD(cell.trainable_params(), learning_rate=0.01)
    if loop == "train_step":
        train_step = aot_ops.train_step(cell, optimizer)
    else:
        grad_fn = ms.value_and_grad(cell, None, optimizer.parameters)

        def train_step(x, target):
            loss, grads = grad_fn(x, target)
            optimizer(grads)
            return loss

        if mode == ms.GRAPH_MODE and loop == "plain":
            # Forward, backward and SGD in one compiled graph: calling value_and_grad and the optimizer as two
            # graphs cost 0.7 ms more per step here.
            train_step = ms.jit(train_step)
    inputs = [(to_ms(x), to_ms(t)) for x, t in batches]
    times, calls, in_programs = [], [], []
    for index, (x, target) in enumerate(inputs):
        if index == WARMUP:  # after the warm-up steps
            clocks = thread_clock()
        before = launches()
        start = time.perf_counter()
        value = float(train_step(x, target).asnumpy())  # waits for every queued launch
        times.append(time.perf_counter() - start)
        after = launches()
        calls.append(tuple(a - b for a, b in zip(after[:3], before[:3])))
        in_programs.append(after[3] - before[3])
    threads = thread_times(clocks, thread_clock(), len(inputs) - WARMUP)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    return times, value, calls[-1], statistics.median(in_programs[WARMUP:]), threads


class ParameterSums(torch.nn.Module):
    """A stand-in for a network: the same parameters, and a loss that only sums them. Ported with fuse=True, a step
    through it costs what MindSpore and the two aot calls cost without the network's work: the floor under the fused
    rows."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.weights = torch.nn.ParameterList([torch.nn.Parameter(p.detach().clone()) for p in model.parameters()])

    def forward(self, x, target):
        return sum(weight.sum() for weight in self.weights)


class NativeParameterSums(msnn.Cell):
    """ParameterSums written directly in MindSpore (no port, no aot call): what MindSpore's own PyNative training
    loop (value_and_grad + nn.SGD, no ms.jit) costs with these parameters and no work."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.weights = ms.ParameterTuple([ms.Parameter(to_ms(p.detach().clone()), name=f"w{k}")
                                          for k, p in enumerate(model.parameters())])

    def construct(self, x, target):
        total = 0
        for weight in self.weights:
            total = total + weight.sum()
        return total


def native_steps(model, batches):
    """The plain PyNative loop on NativeParameterSums."""
    cell = NativeParameterSums(model)
    optimizer = msnn.SGD(cell.trainable_params(), learning_rate=0.01)
    grad_fn = ms.value_and_grad(cell, None, optimizer.parameters)
    times = []
    for x, target in [(to_ms(x), to_ms(t)) for x, t in batches]:
        start = time.perf_counter()
        loss, grads = grad_fn(x, target)
        optimizer(grads)
        float(loss.asnumpy())
        times.append(time.perf_counter() - start)
    return times, float("nan"), (0, 0, 0), 0.0, {}


def network(name):
    """(model, shape of one input batch without the batch size, classes, description)."""
    torch.manual_seed(0)
    if name == "transformer":
        model = WithLoss(TransformerClassifier(D_MODEL, 4, CLASSES))
        model.model.encoder = torch.nn.TransformerEncoderLayer(D_MODEL, 4, dim_feedforward=128, dropout=0.0,
                                                               batch_first=True)
        return model, (SEQ, D_MODEL), CLASSES, f"TransformerEncoderLayer classifier, sequence {SEQ}, d_model {D_MODEL}"
    return WithLoss(ResNet()), CNN_SHAPE[1:], 5, "ResNet (tests/torch_nets.py), 3x64x64"


def measure(model, batches, with_floor=False):
    """name -> (step times, last loss, aot calls per step, seconds inside programs per step, thread times).
    `with_floor`: also torch running AOTAutograd's graphs, and the fused ParameterSums rows (the floor)."""
    results = {"torch eager": torch_steps(copy.deepcopy(model), batches)[:2] + ((0, 0, 0), 0.0, {})}
    results["torch.compile"] = torch_compiled_steps(copy.deepcopy(model), batches)[:2] + ((0, 0, 0), 0.0, {})
    if with_floor:
        results["torch, AOT graphs"] = torch_aot_steps(copy.deepcopy(model), batches)[:2] + ((0, 0, 0), 0.0, {})
    fuses = ((False, "per node"), (True, "fused"), ("compile", "compiled"))
    pynative = ms.PYNATIVE_MODE
    for fuse, label in fuses:  # the default: the ported cell is one ms.jit graph in PyNative
        results[f"PyNative, {label}"] = mindspore_steps(copy.deepcopy(model), batches, pynative, fuse)
    for fuse, label in fuses:  # from_torch(jit=False): operator by operator through PyNative
        results[f"PyNative, {label}, per call"] = mindspore_steps(copy.deepcopy(model), batches, pynative, fuse,
                                                                  jit=False)
    for fuse, label in fuses:
        results[f"PyNative, {label}, train_step"] = mindspore_steps(copy.deepcopy(model), batches, pynative, fuse,
                                                                    loop="train_step")
    for fuse, label in fuses:
        results[f"GRAPH_MODE, {label}"] = mindspore_steps(copy.deepcopy(model), batches, ms.GRAPH_MODE, fuse)
    if with_floor:
        results["GRAPH, fused, 2 jit"] = mindspore_steps(copy.deepcopy(model), batches, ms.GRAPH_MODE, True,
                                                         loop="2 jit")
        floors = (("PyNative, no work", pynative, {}), ("PyNative, no work, per call", pynative, {"jit": False}),
                  ("PyNative, no work, train_step", pynative, {"loop": "train_step"}),
                  ("GRAPH_MODE, no work", ms.GRAPH_MODE, {}))
        for name, mode, options in floors:
            times, _loss, calls, inside, threads = mindspore_steps(ParameterSums(model), batches, mode, True,
                                                                   **options)
            results[name] = (times, float("nan"), calls, inside, threads)
        results["PyNative, native cell, no work"] = native_steps(model, batches)
    return results


def plot(path, net, described, batch_sizes, steps):
    """Median step time against batch size for every variant, on log-log axes, saved as a PNG."""
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    model, shape, classes, _ = network(net)
    curves = {}
    for batch in batch_sizes:
        results = measure(model, data(WARMUP + steps, (batch, *shape), classes))
        for name, (times, *_rest) in results.items():
            curves.setdefault(name, []).append(statistics.median(times[WARMUP:]) * 1e3)
        print(f"batch {batch}: " + ", ".join(f"{n} {v[-1]:.2f} ms" for n, v in curves.items()), flush=True)
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, values in curves.items():
        axes.plot(batch_sizes, values, marker="o", label=name)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    axes.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    axes.set_xlabel("batch size")
    axes.set_ylabel("training step (ms, median)")
    axes.set_title(f"{described}\ntorch {torch.get_num_threads()} thread(s), {os.cpu_count()} CPUs", fontsize=9)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"wrote {path}")
    return curves


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--steps", type=int, default=100, help=f"measured steps (after {WARMUP} warm-up steps)")
    parser.add_argument("--repeat", type=int, default=1, metavar="BLOCKS",
                        help="measure BLOCKS blocks of --steps steps each and print every block's median and ratio "
                             "too (steadiness: PyNative's pipeline can turn slow for whole stretches)")
    parser.add_argument("--net", choices=["transformer", "resnet"], default="transformer")
    parser.add_argument("--launch-blocking", action="store_true",
                        help="ms.runtime.launch_blocking(): PyNative launches each operator synchronously")
    parser.add_argument("--dispatch-threads", type=int, metavar="N",
                        help="ms.runtime.dispatch_threads_num(N) before anything runs")
    parser.add_argument("--thread-times", action="store_true",
                        help="also print, per MindSpore variant, how long each thread ran and waited for a CPU")
    parser.add_argument("--per-step", action="store_true", help="also print every measured step's time")
    parser.add_argument("--plot", metavar="PNG", help="instead: step time against batch size, drawn into PNG")
    parser.add_argument("--batches", default="4,8,16,32,64", help="batch sizes of --plot (default 4,8,16,32,64)")
    options = parser.parse_args(argv)
    torch.set_num_threads(options.threads)
    ms.set_device("CPU")
    if options.launch_blocking:
        ms.runtime.launch_blocking()
    if options.dispatch_threads:
        ms.runtime.dispatch_threads_num(options.dispatch_threads)
    model, shape, classes, described = network(options.net)
    batch = BATCH if options.net == "transformer" else CNN_SHAPE[0]
    print(f"torch {torch.__version__} ({torch.get_num_threads()} thread(s)), mindspore {ms.__version__}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
          f"{', launch_blocking' if options.launch_blocking else ''}")
    if options.plot:
        plot(options.plot, options.net, described, [int(b) for b in options.batches.split(",")], options.steps)
        return
    blocks = max(1, options.repeat)
    print(f"{described}, batch {batch}: median of {options.steps * blocks} training steps after {WARMUP} warm-up "
          f"steps" + (f", in {blocks} blocks of {options.steps}" if blocks > 1 else ""))
    results = measure(model, data(WARMUP + options.steps * blocks, (batch, *shape), classes), with_floor=True)
    base = statistics.median(results["torch eager"][0][WARMUP:])
    compiled = statistics.median(results["torch.compile"][0][WARMUP:])
    print(f"{'':<30} {'step':>10} {'vs torch':>9} {'vs compile':>10} {'aot calls/step':>15} {'in programs':>12} "
          f"{'last loss':>10}")
    for name, (times, loss, (forward, backward, programs), in_programs, _threads) in results.items():
        median = statistics.median(times[WARMUP:])
        calls = f"{forward} + {backward}" if forward else (f"{programs} programs" if programs else "-")
        inside = f"{in_programs * 1e3:.2f} ms" if programs else "-"
        shown_loss = "-" if loss != loss else f"{loss:.5f}"  # NaN: the "no work" rows' loss is not the network's
        print(f"{name:<30} {median * 1e3:>7.2f} ms {median / base:>8.2f}x {median / compiled:>9.2f}x {calls:>15} "
              f"{inside:>12} {shown_loss:>10}")
    if blocks > 1:
        print("each block's median step (ms) and its ratio to torch eager's median; worst block last:")
        for name, (times, *_rest) in results.items():
            medians = [statistics.median(times[WARMUP + k * options.steps:WARMUP + (k + 1) * options.steps])
                       for k in range(blocks)]
            shown = " ".join(f"{m * 1e3:.2f} ({m / base:.2f}x)" for m in medians)
            print(f"  {name:<30} {shown}   worst {max(medians) / base:.2f}x")
    if options.per_step:
        print("every measured step (ms):")
        for name, (times, *_rest) in results.items():
            print(f"  {name:<30} " + " ".join(f"{t * 1e3:.1f}" for t in times[WARMUP:]))
    if options.thread_times:
        print("per measured step, ms each thread ran / waited runnable for a CPU (/proc/self/task/*/schedstat):")
        for name, (*_rest, threads) in results.items():
            if threads:
                print(f"  {name:<30} " + ", ".join(f"{thread} {run:.1f}/{wait:.1f}"
                                                     for thread, (run, wait) in sorted(threads.items())))


if __name__ == "__main__":
    main()
