"""The same Ascend C kernels as PyTorch operators (torch.ops.ascendc.*): eager, torch.compile, opcheck."""
import numpy as np
import pytest
import torch

import aot_ops.ascendc.torch_ops  # noqa: F401  (registers torch.ops.ascendc)
from aot_ops.ascendc import runtime as rt
from ascendc_support import half_bits, leaky_relu_reference, sample


@pytest.fixture(autouse=True)
def fresh_counts():
    rt.reset_path_counts()


def test_add_custom_eager_runs_the_kernel():
    x, y = sample(4096, torch.float16, 1), sample(4096, torch.float16, 2)
    z = torch.ops.ascendc.add_custom(x, y)
    np.testing.assert_array_equal(half_bits(z), half_bits(x.numpy() + y.numpy()))
    assert rt.path_count("AddCustom", "kernel") == 1


def test_add_custom_under_torch_compile_with_inductor():
    x, y = sample((8, 512), torch.float16, 3), sample((8, 512), torch.float16, 4)

    @torch.compile(backend="inductor", fullgraph=True)
    def f(a, b):
        return torch.ops.ascendc.add_custom(a, b, 4) * 2

    torch.testing.assert_close(f(x, y), (x + y) * 2, rtol=0, atol=0)
    assert rt.path_count("AddCustom", "kernel") >= 1


def test_softmax_and_leaky_relu_compile_with_gradients():
    x = sample((37, 24), torch.float32, 5).requires_grad_()

    @torch.compile(backend="aot_eager", fullgraph=True)
    def f(a):
        return torch.ops.ascendc.softmax_custom(a, 3)

    y = f(x)
    torch.testing.assert_close(y, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    (g,) = torch.autograd.grad((y * y).sum(), x)
    leaf = x.detach().clone().requires_grad_()
    (g_ref,) = torch.autograd.grad((torch.softmax(leaf, -1) ** 2).sum(), leaf)
    torch.testing.assert_close(g, g_ref, rtol=1e-4, atol=1e-6)
    h = sample(160, torch.float16, 6)
    out = torch.compile(lambda t: torch.ops.ascendc.leaky_relu_custom(t, 0.2), backend="aot_eager")(h)
    np.testing.assert_array_equal(half_bits(out), half_bits(leaky_relu_reference(h.numpy(), 0.2)))
    assert rt.path_count("SoftmaxCustom", "kernel") >= 1 and rt.path_count("LeakyReluCustom", "kernel") >= 1


@pytest.mark.parametrize("op,args", [
    ("add_custom", lambda: (sample(2048, torch.float16, 1), sample(2048, torch.float16, 2))),
    ("add_custom", lambda: (sample((3, 5), torch.float32, 1).requires_grad_(),
                            sample((3, 5), torch.float32, 2).requires_grad_())),
    ("leaky_relu_custom", lambda: (sample((4, 16), torch.float16, 3).requires_grad_(), 0.2)),
    ("softmax_custom", lambda: (sample((5, 16), torch.float32, 4).requires_grad_(),)),
], ids=["add-kernel", "add-aten", "leaky", "softmax"])
def test_opcheck(op, args):
    torch.library.opcheck(getattr(torch.ops.ascendc, op).default, args())


def test_add_custom_rejects_different_shapes():
    with pytest.raises(RuntimeError, match="differ in shape"):
        torch.ops.ascendc.add_custom(torch.zeros(4, dtype=torch.float16), torch.zeros(8, dtype=torch.float16))
