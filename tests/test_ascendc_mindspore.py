"""The Ascend C operators inside MindSpore Cells, in PyNative and GRAPH_MODE, with gradients."""
import numpy as np
import pytest
import torch
from mindspore import nn

from aot_ops import ascendc
from aot_ops.ascendc import runtime as rt
from ascendc_support import half_bits, leaky_relu_reference, sample
from support import run_forward, run_vjp, to_ms, to_torch


@pytest.fixture(autouse=True)
def fresh_counts():
    rt.reset_path_counts()


class AddThenLeakyRelu(nn.Cell):
    def __init__(self):
        super().__init__()
        self.add = ascendc.add_custom(block_dim=4)
        self.act = ascendc.leaky_relu_custom(negative_slope=0.1, block_dim=4)

    def construct(self, x, y):
        return self.act(self.add(x, y))


def test_add_custom_in_a_cell_is_bit_exact_and_differentiable(mode):
    x, y = sample((8, 256), torch.float16, 1), sample((8, 256), torch.float16, 2)
    (z,) = run_forward(ascendc.add_custom(block_dim=4), [x, y])
    np.testing.assert_array_equal(half_bits(z), half_bits(x.numpy() + y.numpy()))
    dout = sample((8, 256), torch.float16, 3)
    dx, dy = run_vjp(ascendc.add_custom(block_dim=4), [x, y], [dout])
    assert torch.equal(dx, dout) and torch.equal(dy, dout)
    assert rt.path_count("add_custom", "kernel") >= 1


def test_add_custom_falls_back_inside_a_cell(mode):
    x, y = sample((3, 7), torch.float16, 1), sample((3, 7), torch.float16, 2)
    (z,) = run_forward(ascendc.add_custom(), [x, y])
    assert torch.equal(z, x + y)
    assert rt.path_count("add_custom", "aten") >= 1 and rt.path_count("add_custom", "kernel") == 0


def test_a_cell_of_two_ascendc_kernels(mode):
    x, y = sample((4, 512), torch.float16, 4), sample((4, 512), torch.float16, 5)
    out = to_torch(AddThenLeakyRelu()(to_ms(x), to_ms(y)))
    expected = leaky_relu_reference(x.numpy() + y.numpy(), 0.1)
    np.testing.assert_array_equal(half_bits(out), half_bits(expected))
    assert rt.path_count("add_custom", "kernel") >= 1 and rt.path_count("leaky_relu_custom", "kernel") >= 1


def test_leaky_relu_custom_gradient(mode):
    x = sample((2, 64), torch.float32, 6)
    dout = sample((2, 64), torch.float32, 7)
    (dx,) = run_vjp(ascendc.leaky_relu_custom(negative_slope=0.2), [x], [dout])
    torch.testing.assert_close(dx, torch.where(x > 0, dout, dout * 0.2))


def test_softmax_custom_forward_and_gradient(mode):
    x = sample((37, 24), torch.float32, 8)
    (y,) = run_forward(ascendc.softmax_custom(block_dim=3), [x])
    torch.testing.assert_close(y, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    assert rt.path_count("softmax_custom", "kernel") >= 1
    dout = sample((37, 24), torch.float32, 9)
    (dx,) = run_vjp(ascendc.softmax_custom(block_dim=3), [x], [dout])
    leaf = x.clone().requires_grad_()
    torch.softmax(leaf, -1).backward(dout)
    torch.testing.assert_close(dx, leaf.grad, rtol=1e-4, atol=1e-6)


def test_add_custom_refuses_shapes_that_differ_with_the_reason():
    # Same number of elements, another shape: never added element by element.
    x, y = sample((16, 16), torch.float16, 1), sample((256,), torch.float16, 2)
    with pytest.raises(RuntimeError, match=r"AddCustom: aten::add.Tensor \(the fallback, run as x and y differ in "
                                           r"shape.*must match the size"):
        run_forward(ascendc.add_custom(block_dim=1), [x, y])
    x, y = sample((4, 1), torch.float16, 1), sample((1, 256), torch.float16, 2)  # the fallback broadcasts
    with pytest.raises(RuntimeError, match=r"gives output 0 as Half \[4, 256\], the operator's output is "
                                           r"Half \[4, 1\]"):
        run_forward(ascendc.add_custom(block_dim=1), [x, y])


@pytest.mark.parametrize("make, inputs, reference, exact", [
    (lambda: ascendc.add_custom(block_dim=4), [(8, 256), (8, 256)], torch.add, True),
    (lambda: ascendc.softmax_custom(block_dim=3), [(37, 24)], lambda x: torch.softmax(x, -1), False),
], ids=["add_custom", "softmax_custom"])
def test_bundled_kernels_pass_opcheck_in_every_core_order(make, inputs, reference, exact):
    from aot_ops.testing import opcheck

    dtype = torch.float16 if exact else torch.float32
    sample_inputs = [tuple(sample(shape, dtype, seed) for seed, shape in enumerate(inputs, 1))]
    report = opcheck(make(), sample_inputs, reference, exact=exact, core_orders=True,
                     rtol=None if exact else 1e-4, atol=None if exact else 1e-6)
    assert report.passed("core_orders") == 1 and report.passed("graph_dynamic") == 1, report
