"""Per-call time of leaky_relu through the generic ATen bridge, against the compiled single-purpose LeakyRelu
kernel and torch eager (CPU, PyNative).

    .venv/bin/python benchmarks/aten_per_call.py

Median of 5 rounds of the mean time per call; each MindSpore round ends by reading the last result back (PyNative
launches asynchronously). Ratios are measured in the same run.
"""
import mindspore as ms
import numpy as np
import torch

import aot_ops
from _timing import per_call_us
from aot_ops import aten

ms.set_device("CPU")
ms.set_context(mode=ms.PYNATIVE_MODE)


def main():
    compiled = aot_ops.leaky_relu(negative_slope=0.2)
    bridged_op = aten.op("aten::leaky_relu", negative_slope=0.2)
    print(f"torch {torch.__version__}, mindspore {ms.__version__}, torch threads {torch.get_num_threads()}")
    print(f"{'elements':>10} {'aten.op':>10} {'aten.f()':>10} {'compiled':>10} {'torch':>8} "
          f"{'op/compiled':>11} {'op/torch':>9}")
    for n in (16, 1 << 20):
        repeat = 2000 if n == 16 else 200
        data = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        x_ms, x_torch = ms.Tensor(data), torch.from_numpy(data)
        t = {
            "op": per_call_us(lambda: bridged_op(x_ms), repeat),
            "functional": per_call_us(lambda: aten.leaky_relu(x_ms, 0.2), repeat),
            "compiled": per_call_us(lambda: compiled(x_ms), repeat),
            "torch": per_call_us(lambda: torch.nn.functional.leaky_relu(x_torch, 0.2), repeat),
        }
        np.testing.assert_allclose(bridged_op(x_ms).asnumpy(), compiled(x_ms).asnumpy(), rtol=1e-6)
        print(f"{n:>10} {t['op']:>7.1f} us {t['functional']:>7.1f} us {t['compiled']:>7.1f} us {t['torch']:>5.1f} us "
              f"{t['op'] / t['compiled']:>11.2f} {t['op'] / t['torch']:>9.2f}")


if __name__ == "__main__":
    main()
