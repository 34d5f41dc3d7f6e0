"""The Ascend C kernels on the CPU emulator give the reference results for every core order and several blockDim
values, with outputs pre-filled with NaN; sizes meeting the tiling preconditions take the kernel path."""
import numpy as np
import pytest
import torch

from aot_ops.ascendc import runtime as rt
from aot_ops.ascendc import torch_ops as ascendc_torch
from ascendc_support import ORDERS, half_bits, leaky_relu_reference, nan_like, sample


@pytest.fixture(autouse=True)
def fresh_counts():
    rt.reset_path_counts()


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("block_dim,tiles", [(1, 1), (3, 2), (8, 3), (40, 1)])
def test_add_custom_is_bit_exact_in_every_order(order, block_dim, tiles):
    n = 256 * block_dim * tiles
    x, y = sample(n, torch.float16, 1), sample(n, torch.float16, 2)
    out = nan_like(x)
    with rt.emulator(order=order):
        ascendc_torch.run("add_custom", [x, y], out, block_dim=block_dim)
    expected = x.numpy() + y.numpy()  # numpy float16: computed in float32, rounded to nearest-even
    np.testing.assert_array_equal(half_bits(out), half_bits(expected))
    assert rt.path_count("add_custom", "kernel") == 1 and rt.path_count("add_custom", "aten") == 0


def test_add_custom_fills_the_910b_unified_buffer_exactly():
    # 262144 elements on one core: 16 tiles of 16384 fp16, 6 buffers of 32 KB = the whole 192 KB UB.
    n = 262144
    x, y = sample(n, torch.float16, 3), sample(n, torch.float16, 4)
    out = nan_like(x)
    ascendc_torch.run("add_custom", [x, y], out, block_dim=1)
    np.testing.assert_array_equal(half_bits(out), half_bits(x.numpy() + y.numpy()))
    assert rt.path_count("add_custom", "kernel") == 1


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("n,block_dim", [(16, 8), (16 * 37, 3), (4096 * 3 + 48, 8), (8192, 1)])
def test_leaky_relu_custom_handles_tails_bit_exactly(order, n, block_dim):
    x = sample(n, torch.float16, 5)
    out = nan_like(x)
    with rt.emulator(order=order):
        ascendc_torch.run("leaky_relu_custom", [x], out, block_dim=block_dim, negative_slope=0.2)
    np.testing.assert_array_equal(half_bits(out), half_bits(leaky_relu_reference(x.numpy(), 0.2)))
    # The slope is rounded to float16 on the kernel path; torch (float32 slope) agrees within fp16 tolerance.
    torch.testing.assert_close(out, torch.nn.functional.leaky_relu(x, 0.2))
    assert rt.path_count("leaky_relu_custom", "kernel") == 1


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("shape,block_dim", [((1, 8), 8), ((37, 24), 3), ((5, 3, 64), 8), ((100, 16), 1)])
def test_softmax_custom_handles_row_tails(order, shape, block_dim):
    x = sample(shape, torch.float32, 6)
    out = nan_like(x)
    with rt.emulator(order=order):
        ascendc_torch.run("softmax_custom", [x], out, block_dim=block_dim)
    torch.testing.assert_close(out, torch.softmax(x, dim=-1), rtol=1e-5, atol=1e-6)
    assert rt.path_count("softmax_custom", "kernel") == 1


def test_softmax_custom_tiles_rows_by_the_unified_buffer_size():
    # 1024 columns: 4 buffers x 8 rows x 4 KB = 128 KB fits 192 KB; with a 40 KB UB only 2 rows fit per tile.
    x = sample((19, 1024), torch.float32, 7)
    for ub in (rt.UB_910B, 40 * 1024):
        out = nan_like(x)
        with rt.emulator(ub_bytes=ub):
            ascendc_torch.run("softmax_custom", [x], out, block_dim=2)
        torch.testing.assert_close(out, torch.softmax(x, dim=-1), rtol=1e-5, atol=1e-6)
    assert rt.path_count("softmax_custom", "kernel") == 2


def test_results_do_not_depend_on_the_core_order():
    x, y = sample(256 * 8 * 2, torch.float16, 8), sample(256 * 8 * 2, torch.float16, 9)
    results = []
    for order in ORDERS:
        out = nan_like(x)
        with rt.emulator(order=order):
            ascendc_torch.run("add_custom", [x, y], out, block_dim=8)
        results.append(half_bits(out).copy())
    assert all(np.array_equal(results[0], r) for r in results[1:])


def test_emulator_settings_reject_unknown_orders():
    with pytest.raises(ValueError, match="unknown core order 'sideways'"):
        rt.configure_emulator("sideways")
    assert rt.emulator_settings() == ("in_order", rt.UB_910B)
