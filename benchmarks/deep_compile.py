"""How the first calls of a ported cell grow with the network's depth: MindSpore compiles the cell's graph on the
first evaluation call and the gradient's graph on the first training step.

    .venv/bin/python benchmarks/deep_compile.py [--depths 100,200,400] [--modes graph,pynative]

The network is a ModuleList of `depth` Linear(8, 8) layers with tanh between them (2 x depth Parameters, almost no
arithmetic: what is timed is MindSpore's handling of the graph), ported with fuse=True. Each case runs in a fresh
process: the first evaluation call, the first `ms.value_and_grad` call with respect to every Parameter, and the
median of 5 later steps. Benchmark alone: on two cores another busy process doubles MindSpore's times.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

CASE = """
import json, statistics, sys, time
import mindspore as ms
import torch
import aot_ops
from aot_ops._core.convert import to_ms

depth, mode = {depth}, {mode!r}
ms.set_context(mode=ms.GRAPH_MODE if mode == "graph" else ms.PYNATIVE_MODE)


class Deep(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x.sum()


torch.manual_seed(0)
x = torch.randn(2, 8)
start = time.perf_counter()
cell = aot_ops.from_torch(Deep(), (x,), fuse=True)
port = time.perf_counter() - start
xs = to_ms(x)
cell.set_train(False)
start = time.perf_counter()
cell(xs).asnumpy()
first_eval = time.perf_counter() - start
cell.set_train(True)
step = ms.value_and_grad(cell, None, cell.trainable_params())
start = time.perf_counter()
step(xs)[0].asnumpy()
first_step = time.perf_counter() - start
later = []
for _ in range(5):
    start = time.perf_counter()
    loss, grads = step(xs)
    grads[-1].asnumpy()
    later.append(time.perf_counter() - start)
print("RESULT", json.dumps(dict(port=port, first_eval=first_eval, first_step=first_step,
                                later_step=statistics.median(later))))
"""


def run_case(depth: int, mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CASE.format(depth=depth, mode=mode)], capture_output=True,
                          text=True)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"depth {depth}, {mode}: no result\n{done.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", default="100,200,400")
    parser.add_argument("--modes", default="graph,pynative")
    args = parser.parse_args()
    print("| depth | Parameters | mode | port s | first evaluation s | first training step s | later step ms |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for depth in (int(d) for d in args.depths.split(",")):
        for mode in args.modes.split(","):
            r = run_case(depth, mode)
            print(f"| {depth} | {2 * depth} | {mode} | {r['port']:.1f} | {r['first_eval']:.2f} | "
                  f"{r['first_step']:.2f} | {r['later_step'] * 1e3:.1f} |", flush=True)


if __name__ == "__main__":
    main()
