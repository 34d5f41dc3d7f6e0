"""Per-call time of LeakyRelu: the aot bridge vs MindSpore's own ops.leaky_relu vs torch eager (CPU, PyNative).

    .venv/bin/python benchmarks/leaky_relu_per_call.py [--repeat N]

Each figure is the median over 5 rounds of the mean time per call in a loop of N calls, synchronised at the end of
each round (MindSpore's PyNative launches asynchronously; reading the last result back waits for the queue).
Ratios are measured in the same run.
"""
import argparse
import mindspore as ms
import numpy as np
import torch
from mindspore import ops

import aot_ops
from _timing import per_call_us

ms.set_device("CPU")
ms.set_context(mode=ms.PYNATIVE_MODE)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=0, help="calls per round (default: by size)")
    args = parser.parse_args()
    bridge = aot_ops.leaky_relu()
    print(f"torch {torch.__version__}, mindspore {ms.__version__}, threads: torch {torch.get_num_threads()}")
    print(f"{'elements':>10} {'aot LeakyRelu':>14} {'ops.leaky_relu':>15} {'torch':>9} {'aot/ms':>7} {'aot/torch':>9}")
    for n in (16, 1 << 20):
        repeat = args.repeat or (2000 if n == 16 else 200)
        data = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        x_ms, x_torch = ms.Tensor(data), torch.from_numpy(data)
        out = {
            "aot": per_call_us(lambda: bridge(x_ms), repeat),
            "ms": per_call_us(lambda: ops.leaky_relu(x_ms, 0.01), repeat),
            "torch": per_call_us(lambda: torch.nn.functional.leaky_relu(x_torch, 0.01), repeat),
        }
        np.testing.assert_allclose(bridge(x_ms).asnumpy(), ops.leaky_relu(x_ms, 0.01).asnumpy(), rtol=1e-6)
        print(f"{n:>10} {out['aot']:>11.1f} us {out['ms']:>12.1f} us {out['torch']:>6.1f} us "
              f"{out['aot'] / out['ms']:>7.2f} {out['aot'] / out['torch']:>9.2f}")


if __name__ == "__main__":
    main()
