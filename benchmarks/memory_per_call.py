"""Memory over many calls: RSS growth of the aot bridge against MindSpore's own operator (CPU, PyNative and
GRAPH_MODE), each in a fresh process.

    .venv/bin/python benchmarks/memory_per_call.py [--calls 100000] [--only NAME]

For each operator the process makes 1,000 warm-up calls, then reports its RSS growth after 10% of the calls and
after all of them. A leak shows as growth that keeps rising after the first 10%; the first 10% includes
MindSpore's own caches filling.
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

# MindSpore's Custom path without this project: a plain C kernel behind a hand-written ops.Custom.
PLAIN_C = (
    "ops.Custom(str(aot_ops.load('memory_plain_c', [__import__('pathlib').Path(__file__).with_name('plain.c')]).path)"
    " + ':LeakyRelu', out_shape=lambda x: x, out_dtype=lambda x: x, func_type='aot')")
PLAIN_C_SOURCE = r"""
#include <stdint.h>
int LeakyRelu(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
              void *extra) {
  int64_t n = 1;
  for (int i = 0; i < ndims[0]; ++i) n *= shapes[0][i];
  const float *x = params[0];
  float *y = params[1];
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0.2f * x[i];
  return 0;
}
"""

VARIANTS = {
    "aot_ops.leaky_relu": "aot_ops.leaky_relu(0.2)",
    "aten.op(leaky_relu)": "aten.op('aten::leaky_relu', negative_slope=0.2)",
    "ops.leaky_relu (MindSpore)": "lambda x: ops.leaky_relu(x, 0.2)",
    "ops.Custom, plain C kernel": PLAIN_C,
}

CHILD = r'''
import resource, sys, warnings
warnings.filterwarnings("ignore")
import mindspore as ms, numpy as np
from mindspore import nn, ops
import aot_ops
from aot_ops import aten
ms.set_device("CPU")
mode, calls = int(sys.argv[1]), int(sys.argv[2])
ms.set_context(mode=mode)
fn = {expression}

class Call(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fn = fn
    def construct(self, x):
        return self.fn(x)

step = fn if mode == ms.PYNATIVE_MODE else Call()

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20

x = ms.Tensor(np.random.default_rng(0).standard_normal(256).astype(np.float32))
for _ in range(1000):
    y = step(x)
y.asnumpy()
start = rss_mb()
marks = []
for i in range(1, calls + 1):
    y = step(x)
    if i % (calls // 10) == 0:
        y.asnumpy()
        marks.append(rss_mb() - start)
print(f"{{marks[0]:.1f}} {{marks[-1]:.1f}}")
'''


def measure(expression: str, mode: int, calls: int) -> tuple[float, float]:
    # A real file: GRAPH_MODE compiles a Cell from its source.
    with tempfile.TemporaryDirectory() as folder:
        child = Path(folder) / "child.py"
        child.write_text(CHILD.format(expression=expression))
        child.with_name("plain.c").write_text(PLAIN_C_SOURCE)
        out = subprocess.run([sys.executable, str(child), str(mode), str(calls)], check=True,
                             capture_output=True, text=True).stdout.split()
    return float(out[-2]), float(out[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--only", help="only the operators whose name contains this")
    args = parser.parse_args()
    print(f"RSS growth in MB after 1,000 warm-up calls of a 256-element float32 leaky_relu; {args.calls} calls")
    print(f"{'operator':<28} {'mode':<10} {'after 10%':>10} {'after 100%':>11}")
    for name, expression in VARIANTS.items():
        if args.only and args.only not in name:
            continue
        for mode, mode_name in ((1, "PyNative"), (0, "GRAPH")):
            first, last = measure(expression, mode, args.calls)
            print(f"{name:<28} {mode_name:<10} {first:>10.1f} {last:>11.1f}", flush=True)


if __name__ == "__main__":
    main()
