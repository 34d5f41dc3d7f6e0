"""The same Ascend C kernels as PyTorch operators (torch.ops.ascendc.*): eager, torch.compile, opcheck."""
import numpy as np
import pytest
import torch

from aot_ops.ascendc import torch_ops as ascendc_torch  # registers torch.ops.ascendc
from aot_ops.ascendc import runtime as rt
from ascendc_support import half_bits, leaky_relu_reference, sample


@pytest.fixture(autouse=True)
def fresh_counts():
    rt.reset_path_counts()


def test_add_custom_eager_runs_the_kernel():
    x, y = sample(4096, torch.float16, 1), sample(4096, torch.float16, 2)
    z = torch.ops.ascendc.add_custom(x, y)
    np.testing.assert_array_equal(half_bits(z), half_bits(x.numpy() + y.numpy()))
    assert rt.path_count("add_custom", "kernel") == 1


@pytest.mark.slow  # Inductor compiles C++: 6-9 s
def test_add_custom_under_torch_compile_with_inductor():
    x, y = sample((8, 512), torch.float16, 3), sample((8, 512), torch.float16, 4)

    @torch.compile(backend="inductor", fullgraph=True)
    def f(a, b):
        return torch.ops.ascendc.add_custom(a, b, 4) * 2

    torch.testing.assert_close(f(x, y), (x + y) * 2, rtol=0, atol=0)
    assert rt.path_count("add_custom", "kernel") >= 1


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
    assert rt.path_count("softmax_custom", "kernel") >= 1 and rt.path_count("leaky_relu_custom", "kernel") >= 1


@pytest.mark.parametrize("op,args", [
    ("add_custom", lambda: (sample(2048, torch.float16, 1), sample(2048, torch.float16, 2))),
    ("add_custom", lambda: (sample((3, 5), torch.float32, 1).requires_grad_(),
                            sample((3, 5), torch.float32, 2).requires_grad_())),
    ("leaky_relu_custom", lambda: (sample((4, 16), torch.float16, 3).requires_grad_(), 0.2)),
    ("softmax_custom", lambda: (sample((5, 16), torch.float32, 4).requires_grad_(),)),
], ids=["add-kernel", "add-aten", "leaky", "softmax"])
def test_opcheck(op, args):
    torch.library.opcheck(getattr(torch.ops.ascendc, op).default, args())


def test_add_custom_takes_the_fallbacks_shapes_where_the_kernel_cannot():
    # The kernel adds element by element: shapes that differ run aten::add.Tensor, which broadcasts or refuses.
    x, y = sample((4, 1), torch.float16, 1), sample((1, 256), torch.float16, 2)
    rt.reset_path_counts()
    torch.testing.assert_close(torch.ops.ascendc.add_custom(x, y, 1), torch.add(x, y), rtol=0, atol=0)
    assert (rt.path_count("add_custom", "kernel"), rt.path_count("add_custom", "aten")) == (0, 1)
    with pytest.raises(RuntimeError, match="broadcast"):
        torch.ops.ascendc.add_custom(torch.zeros(4, dtype=torch.float16), torch.zeros(8, dtype=torch.float16))
    out = torch.full((16, 16), float("nan"), dtype=torch.float16)  # same number of elements, another shape
    with pytest.raises(RuntimeError, match="broadcast"):
        ascendc_torch.run("add_custom", [sample((16, 16), torch.float16, 3), sample((256,), torch.float16, 4)],
                          out, block_dim=1)
    assert torch.isnan(out).all()
