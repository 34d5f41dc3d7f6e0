"""GRAPH_MODE with input shapes unknown until run time: one compiled graph serves every batch size (and rank)."""
from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mindspore import nn, ops

import aot_ops
from aot_ops._core import signature as _signature
from support import sample, to_ms, to_torch

BATCHES = (1, 3, 8, 2, 17)


class Block(nn.Cell):
    """matmul -> gelu(tanh) -> layer_norm -> leaky_relu * itself -> softmax -> sum over the last dim."""

    def __init__(self, w, gamma, beta):
        super().__init__()
        self.w, self.gamma, self.beta = (ms.Parameter(to_ms(t), name=n) for t, n in ((w, "w"), (gamma, "gamma"),
                                                                                        (beta, "beta")))
        self.matmul = aot_ops.matmul()
        self.gelu = aot_ops.gelu(approximate="tanh")
        self.norm = aot_ops.layer_norm([8], eps=1e-4)
        self.act = aot_ops.leaky_relu(negative_slope=0.2)
        self.mul = aot_ops.mul()
        self.softmax = aot_ops.softmax(dim=-1)
        self.sum = aot_ops.sum(dim=-1)

    def construct(self, x):
        h = self.norm(self.gelu(self.matmul(x, self.w)), self.gamma, self.beta)
        return self.sum(self.softmax(self.mul(self.act(h), h)))


def torch_block(x, w, gamma, beta):
    h = F.layer_norm(F.gelu(x @ w, approximate="tanh"), [8], gamma, beta, eps=1e-4)
    return torch.sum(torch.softmax(F.leaky_relu(h, 0.2) * h, -1), -1)


class InputGrads(nn.Cell):
    """Gradients of sum(net(x) * cotangent) with respect to x and the cotangent. (GRAPH_MODE refuses a dynamic
    `sens`, so the cotangent enters through an aot mul and sum instead.)"""

    def __init__(self, net):
        super().__init__()
        self.net = net
        self.mul = aot_ops.mul()
        self.total = aot_ops.sum()
        self.grad = ops.GradOperation(get_all=True)

    def loss(self, x, cotangent):
        return self.total(self.mul(self.net(x), cotangent))

    def construct(self, x, cotangent):
        return self.grad(self.loss)(x, cotangent)


@pytest.fixture
def graph_mode():
    ms.set_context(mode=ms.GRAPH_MODE)
    yield
    ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.fixture
def inference_count(monkeypatch):
    """How often MindSpore infers an aot operator's output (at graph compilation, in GRAPH_MODE)."""
    calls = []
    original = _signature.KernelSignature.output_dtypes
    monkeypatch.setattr(_signature.KernelSignature, "output_dtypes",
                        lambda self, dtypes: calls.append(self.symbol) or original(self, dtypes))
    return calls


def test_dynamic_batch_forward_and_gradient_in_one_graph(graph_mode, inference_count):
    w, gamma, beta = sample((6, 8), torch.float32, 1), sample((8,), torch.float32, 2), sample((8,), torch.float32, 3)
    net = Block(w, gamma, beta)
    net.set_inputs(ms.Tensor(shape=[None, 6], dtype=ms.float32))
    grads = InputGrads(net)
    grads.set_inputs(ms.Tensor(shape=[None, 6], dtype=ms.float32), ms.Tensor(shape=[None], dtype=ms.float32))
    after_first = None
    for i, batch in enumerate(BATCHES):
        x = sample((batch, 6), torch.float32, 10 + i)
        sens = sample((batch,), torch.float32, 20 + i)
        y = to_torch(net(to_ms(x)))
        dx = to_torch(grads(to_ms(x), to_ms(sens))[0])
        leaf = x.clone().requires_grad_()
        expected = torch_block(leaf, w, gamma, beta)
        (expected_dx,) = torch.autograd.grad(expected, leaf, sens)
        torch.testing.assert_close(y, expected.detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(dx, expected_dx, rtol=1e-4, atol=1e-6)
        if after_first is None:
            after_first = len(inference_count)
    assert after_first > 0
    assert len(inference_count) == after_first, "the graph was compiled again for a new batch size"


@pytest.mark.parametrize("make_op,torch_fn", [
    (lambda: aot_ops.gelu(), F.gelu),
    (lambda: aot_ops.sum(dim=-1, keepdim=True), lambda x: torch.sum(x, -1, keepdim=True)),
], ids=["gelu", "sum"])
def test_dynamic_rank(graph_mode, make_op, torch_fn):
    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.op = make_op()

        def construct(self, x):
            return self.op(x)

    net = Net()
    net.set_inputs(ms.Tensor(shape=None, dtype=ms.float64))
    grads = InputGrads(net)
    grads.set_inputs(ms.Tensor(shape=None, dtype=ms.float64), ms.Tensor(shape=None, dtype=ms.float64))
    for shape in ((5,), (2, 3), (2, 1, 4)):
        x = sample(shape, torch.float64)
        expected = torch_fn(x)
        np.testing.assert_allclose(net(to_ms(x)).asnumpy(), expected.numpy(), rtol=1e-12)
        sens = sample(tuple(expected.shape), torch.float64, 7)
        leaf = x.clone().requires_grad_()
        (expected_dx,) = torch.autograd.grad(torch_fn(leaf), leaf, sens)
        dx = grads(to_ms(x), to_ms(sens))[0]
        np.testing.assert_allclose(dx.asnumpy(), expected_dx.numpy(), rtol=1e-12)
