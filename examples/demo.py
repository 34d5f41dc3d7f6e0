"""A MindSpore network whose layers are PyTorch ATen operators, run through ops.Custom(func_type="aot").

    ./run.sh demo

The same Cell runs in PyNative and in GRAPH_MODE; its gradient flows through the bridged operators' backward
kernels. Every result is compared with torch on the same data.
"""
import mindspore as ms
import numpy as np
import torch
from mindspore import nn

import aot_ops

np.set_printoptions(precision=4, suppress=True)
ms.set_device("CPU")


class TinyClassifier(nn.Cell):
    """scores = softmax(leaky_relu(x @ w1 + b1) @ w2); also returns the winning class per row."""

    def __init__(self, w1, b1, w2):
        super().__init__()
        self.w1 = ms.Parameter(ms.Tensor(w1), name="w1")
        self.b1 = ms.Parameter(ms.Tensor(b1), name="b1")
        self.w2 = ms.Parameter(ms.Tensor(w2), name="w2")
        self.matmul = aot_ops.matmul()
        self.add = aot_ops.add()
        self.leaky_relu = aot_ops.leaky_relu()
        self.softmax = aot_ops.softmax()
        self.max = aot_ops.max()

    def construct(self, x):
        hidden = self.leaky_relu(self.add(self.matmul(x, self.w1), self.b1))
        scores = self.softmax(self.matmul(hidden, self.w2))
        confidence, label = self.max(scores)
        return scores, confidence, label


def torch_reference(x, w1, b1, w2):
    hidden = torch.nn.functional.leaky_relu(x @ w1 + b1, 0.01)
    return torch.softmax(hidden @ w2, -1)


def main():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3)).astype(np.float32)
    w1 = rng.standard_normal((3, 5)).astype(np.float32)
    b1 = rng.standard_normal(5).astype(np.float32)
    w2 = rng.standard_normal((5, 2)).astype(np.float32)
    expected = torch_reference(*map(torch.from_numpy, (x, w1, b1, w2))).numpy()

    print(f"kernel library: {aot_ops.library_path()}")
    print("input x:\n", x)
    net = TinyClassifier(w1, b1, w2)
    for mode, name in ((ms.PYNATIVE_MODE, "PyNative"), (ms.GRAPH_MODE, "GRAPH_MODE")):
        ms.set_context(mode=mode)
        scores, confidence, label = net(ms.Tensor(x))
        print(f"\n[{name}] class scores (softmax):\n", scores.asnumpy())
        print(f"[{name}] predicted class:", label.asnumpy(), " confidence:", confidence.asnumpy())
        np.testing.assert_allclose(scores.asnumpy(), expected, rtol=1e-5, atol=1e-6)
        print(f"[{name}] matches torch: yes")

    # Gradient of a loss with respect to the first layer's weight, through matmul, add, leaky_relu and softmax.
    ms.set_context(mode=ms.GRAPH_MODE)
    target = np.array([0, 1, 1, 0])

    def loss_fn(inputs):
        scores, _, _ = net(inputs)
        picked = scores * ms.Tensor(np.eye(2, dtype=np.float32)[target])
        return -picked.sum()

    grad_w1 = ms.grad(loss_fn, grad_position=None, weights=net.w1)(ms.Tensor(x))
    tw1 = torch.from_numpy(w1).requires_grad_()
    tscores = torch_reference(torch.from_numpy(x), tw1, torch.from_numpy(b1), torch.from_numpy(w2))
    (-(tscores * torch.eye(2)[torch.from_numpy(target)]).sum()).backward()
    print("\n[GRAPH_MODE] d loss / d w1 through the aot backward kernels:\n", grad_w1.asnumpy())
    np.testing.assert_allclose(grad_w1.asnumpy(), tw1.grad.numpy(), rtol=1e-4, atol=1e-6)
    print("[GRAPH_MODE] gradient matches torch autograd: yes")


if __name__ == "__main__":
    main()
