"""Per-call time of a bridged operator in PyNative: the fast front against the Custom aot path, MindSpore's built-in
ops.relu and torch eager, from 16 elements to 1M; and one ms.grad step through each (CPU).

    .venv/bin/python benchmarks/front_per_call.py [--plot docs/front_per_call.png] [--threads N]
                                                  [--sizes 16,256,4096,65536,1048576]

Rows: `aot_ops.leaky_relu` and `aten.op("aten::leaky_relu")` through the front (what a call does by default) and
through the ops.Custom path (the same primitive, called as ops.Custom; what AOT_OPS_FAST_FRONT=0 gives), the
functional `aten.leaky_relu(x, 0.2)` (front), against
`ops.relu` (the cheapest MindSpore built-in) and torch's leaky_relu. Each figure is the median over 5 rounds of the
mean time per call in a loop, synchronised at the end of each round; ratios come from the same run. The gradient
step is `ms.grad(lambda x: op(x))(x)` at 16 elements: MindSpore records it through the Custom primitive (the front
serves calls outside gradient recording). Thread counts: torch uses --threads intra-op threads (default: one per
core), and so do the bridged ATen kernels on MindSpore's device thread (ATen sets each new thread's OpenMP count
from torch.set_num_threads); MindSpore's built-in kernels use MindSpore's own thread pool. On a machine with few
cores these pools take CPU from each other: mid-size figures (4K-64K elements) move by 2x between runs.
"""
import argparse

import mindspore as ms
import numpy as np
import torch
from mindspore import ops

import aot_ops
from _timing import per_call_us
from aot_ops import aten
from aot_ops._core import front

ms.set_device("CPU")
ms.set_context(mode=ms.PYNATIVE_MODE)


def custom_path(op):
    """The same AotOp called through ops.Custom, bypassing the front."""
    return lambda *args: ops.Custom.__call__(op, *args)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="16,256,4096,65536,1048576")
    parser.add_argument("--plot", help="write a log-log PNG of time per call against elements")
    parser.add_argument("--threads", type=int, help="torch's intra-op threads (default: torch's, one per core)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = [int(s) for s in args.sizes.split(",")]
    leaky = aot_ops.leaky_relu(negative_slope=0.2)
    aten_leaky = aten.op("aten::leaky_relu", negative_slope=0.2)
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), mindspore {ms.__version__}; "
          f"front: {front.status()}")
    if not front.active():
        raise SystemExit("the fast front is not active: nothing to compare")
    rows = {"torch": [], "ops.relu": [], "leaky_relu front": [], "leaky_relu Custom": [], "aten.op front": [],
            "aten.op Custom": [], "aten.f() front": []}
    print(f"{'elements':>9} " + " ".join(f"{name:>17}" for name in rows) + f" {'front/relu':>10} {'aten/relu':>9} "
          f"{'front/torch':>11}")
    for n in sizes:
        repeat = max(50, min(4000, 2_000_000 // n))
        data = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        x, xt = ms.Tensor(data), torch.from_numpy(data)
        expected = torch.nn.functional.leaky_relu(xt, 0.2).numpy()
        for op in (leaky, aten_leaky, custom_path(leaky), custom_path(aten_leaky)):
            np.testing.assert_allclose(op(x).asnumpy(), expected, rtol=1e-6)
        # torch last: its OpenMP threads spin for a while after a parallel kernel, and MindSpore's built-in
        # kernels measured right after them took milliseconds per call on 2 cores.
        t = {
            "ops.relu": per_call_us(lambda: ops.relu(x), repeat),
            "leaky_relu front": per_call_us(lambda: leaky(x), repeat),
            "leaky_relu Custom": per_call_us(lambda: custom_path(leaky)(x), repeat),
            "aten.op front": per_call_us(lambda: aten_leaky(x), repeat),
            "aten.op Custom": per_call_us(lambda: custom_path(aten_leaky)(x), repeat),
            # the functional form binds its arguments to the schema on every call
            "aten.f() front": per_call_us(lambda: aten.leaky_relu(x, 0.2), repeat),
            "torch": per_call_us(lambda: torch.nn.functional.leaky_relu(xt, 0.2), repeat),
        }
        for name, value in t.items():
            rows[name].append(value)
        print(f"{n:>9} " + " ".join(f"{t[name]:>14.1f} us" for name in rows) +
              f" {t['leaky_relu front'] / t['ops.relu']:>10.2f} {t['aten.op front'] / t['ops.relu']:>9.2f} "
              f"{t['leaky_relu front'] / t['torch']:>11.2f}")
    grad_step(leaky, aten_leaky)
    if args.plot:
        plot(args.plot, sizes, rows)


def grad_step(leaky, aten_leaky):
    x = ms.Tensor(np.random.default_rng(1).standard_normal(16).astype(np.float32))
    steps = {name: ms.grad(fn) for name, fn in (("ops.relu", lambda v: ops.relu(v)),
                                                ("leaky_relu", lambda v: leaky(v)),
                                                ("aten.op", lambda v: aten_leaky(v)))}
    expected = np.where(x.asnumpy() > 0, 1.0, 0.2)
    for name in ("leaky_relu", "aten.op"):
        np.testing.assert_allclose(steps[name](x).asnumpy(), expected, rtol=1e-6)
    t = {name: per_call_us(lambda step=step: step(x), 300) for name, step in steps.items()}
    print("ms.grad step at 16 elements: " + ", ".join(f"{name} {value:.0f} us" for name, value in t.items()) +
          f"; leaky_relu/relu {t['leaky_relu'] / t['ops.relu']:.2f}, aten.op/relu {t['aten.op'] / t['ops.relu']:.2f}")


def plot(path, sizes, rows):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for name, values in rows.items():
        axes.plot(sizes, values, marker="o", label=name)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("elements (float32)")
    axes.set_ylabel("time per call (µs)")
    axes.set_title("PyNative per-call time: fast front vs ops.Custom vs built-in vs torch")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
