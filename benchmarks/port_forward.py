"""Evaluation forward time of a PyTorch network ported with aot_ops.from_torch, against torch (CPU).

    .venv/bin/python benchmarks/port_forward.py [--threads 1] [--calls 200] [--net transformer|resnet]
                                               [--batches 1,32]

The networks are port_step.py's (the TransformerEncoderLayer classifier, sequence 16, d_model 64; the tests'
ResNet at 3x64x64), in evaluation mode, without the loss. Per batch size: torch eager under torch.no_grad(),
torch.compile (Inductor's defaults) of the same module, and the ported cell fused (fuse=True: one program call)
and compiled (fuse="compile": the evaluation graph compiled by AOTInductor), called from Python in PyNative and in
GRAPH_MODE (the cell's construct compiled by MindSpore). Each call waits for its result (asnumpy / the torch
tensor). PyNative rows call the cell as it comes from from_torch (one MindSpore graph per call, jit=True); the
", per call" rows port with jit=False (operator by operator through PyNative). Prints the median over the measured
calls after warm-up calls, the ratio to torch eager measured in the
same run, and the median time inside the program launch (`aot_ops.program_seconds()`: the network's own work,
the rest is MindSpore's). The "no work" rows are the floor: a stand-in with the same parameters and input that
only sums them, ported with fuse=True, i.e. what MindSpore's call of one program costs before any work. torch's intra-op threads (also those of the bridged kernels and the compiled programs) are set by
--threads.
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

import aot_ops
from aot_ops._core.convert import to_ms

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from port_step import network  # noqa: E402

WARMUP = 30


def median_ms(call, inputs, calls):
    """(median ms per call, median ms per call inside program launches) over the measured calls."""
    times, inside = [], []
    for k in range(WARMUP + calls):
        programs = aot_ops.program_seconds()
        start = time.perf_counter()
        call(inputs[k % len(inputs)])
        times.append(time.perf_counter() - start)
        inside.append(aot_ops.program_seconds() - programs)
    return statistics.median(times[WARMUP:]) * 1e3, statistics.median(inside[WARMUP:]) * 1e3


class ParameterSums(torch.nn.Module):
    """A stand-in with the same parameters and input whose output only sums them: ported with fuse=True, a call
    costs what MindSpore's call of one program with these inputs costs without the network's work (the floor)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.weights = torch.nn.ParameterList([torch.nn.Parameter(p.detach().clone()) for p in model.parameters()])

    def forward(self, x):
        return x.sum() + sum(weight.sum() for weight in self.weights)


def torch_call(model):
    def call(x):
        with torch.no_grad():
            return model(x)
    return call


def ported_call(model, example, mode, fuse, jit=True):
    ms.set_context(mode=mode)
    cell = aot_ops.from_torch(model, (example,), fuse=fuse, jit=jit)
    cell.set_train(False)
    return lambda x: cell(x).asnumpy()


def measure(model, shape, batch, calls):
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(batch, *shape, generator=gen) for _ in range(4)]
    xs_ms = [to_ms(x) for x in xs]
    rows = {"torch eager": median_ms(torch_call(model), xs, calls)}
    torch._dynamo.reset()  # a fresh start: Dynamo would otherwise compile a second batch size with dynamic shapes
    rows["torch.compile"] = median_ms(torch_call(torch.compile(copy.deepcopy(model))), xs, calls)
    variants = (("PyNative", ms.PYNATIVE_MODE, True), ("PyNative", ms.PYNATIVE_MODE, False),
                ("GRAPH_MODE", ms.GRAPH_MODE, True))
    for mode_name, mode, jit in variants:
        suffix = "" if jit else ", per call"
        for fuse, label in ((True, "fused"), ("compile", "compiled")):
            rows[f"{mode_name}, {label}{suffix}"] = median_ms(
                ported_call(copy.deepcopy(model), xs[0], mode, fuse, jit), xs_ms, calls)
        rows[f"{mode_name}, no work{suffix}"] = median_ms(
            ported_call(ParameterSums(model).eval(), xs[0], mode, True, jit), xs_ms, calls)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    parser.add_argument("--calls", type=int, default=200, help=f"measured calls (after {WARMUP} warm-up calls)")
    parser.add_argument("--net", choices=["transformer", "resnet"], default="transformer")
    parser.add_argument("--batches", default="1,32", help="batch sizes (default 1,32)")
    options = parser.parse_args(argv)
    torch.set_num_threads(options.threads)
    ms.set_device("CPU")
    with_loss, shape, _classes, described = network(options.net)
    model = with_loss.model.eval()
    print(f"torch {torch.__version__} ({torch.get_num_threads()} thread(s)), mindspore {ms.__version__}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print(f"{described}, evaluation forward: median of {options.calls} calls after {WARMUP} warm-up calls")
    for batch in (int(b) for b in options.batches.split(",")):
        rows = measure(model, shape, batch, options.calls)
        base = rows["torch eager"][0]
        print(f"batch {batch}:{'call':>38} {'vs torch':>9} {'in program':>11}")
        for name, (value, inside) in rows.items():
            shown = f"{inside:.3f} ms" if inside else "-"
            print(f"  {name:<30} {value:>8.3f} ms {value / base:>8.2f}x {shown:>11}")


if __name__ == "__main__":
    main()
