"""When a kernel's tiling preconditions do not hold, the operator runs ATen instead: the result is still complete
and correct, and the path counter shows which path ran."""
import pytest
import torch

from aot_ops.ascendc import runtime as rt
from aot_ops.ascendc import torch_ops as ascendc_torch
from ascendc_support import nan_like, sample


@pytest.fixture(autouse=True)
def fresh_counts():
    rt.reset_path_counts()


@pytest.mark.parametrize("n,dtype,block_dim", [
    (100, torch.float16, 8),             # not a multiple of 256 * blockDim: tails would stay unwritten
    (256 * 3, torch.float16, 8),         # a multiple of 256, not of 256 * 8
    (256 * 1025, torch.float16, 1),      # tiles of 16400 fp16 x 6 buffers exceed the 192 KB UB
    (2048, torch.float32, 8),            # the kernel is float16 only
    (2048, torch.float16, 0),            # blockDim outside [1, 65535]
])
def test_add_custom_falls_back_to_aten(n, dtype, block_dim):
    x, y = sample(n, dtype, 1), sample(n, dtype, 2)
    out = nan_like(x)
    ascendc_torch.run("add_custom", [x, y], out, block_dim=block_dim)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    assert (rt.path_count("add_custom", "kernel"), rt.path_count("add_custom", "aten")) == (0, 1)


def test_add_custom_uses_the_256kb_unified_buffer_when_configured():
    n = 256 * 1025  # too big for 192 KB with one core, fits 256 KB
    x, y = sample(n, torch.float16, 1), sample(n, torch.float16, 2)
    out = nan_like(x)
    with rt.emulator(ub_bytes=rt.UB_910A):
        ascendc_torch.run("add_custom", [x, y], out, block_dim=1)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    assert rt.path_count("add_custom", "kernel") == 1


@pytest.mark.parametrize("n,dtype", [(15, torch.float16), (1000, torch.float16), (64, torch.float32)])
def test_leaky_relu_custom_falls_back_to_aten(n, dtype):
    x = sample(n, dtype, 3)
    out = nan_like(x)
    ascendc_torch.run("leaky_relu_custom", [x], out, negative_slope=0.2)
    torch.testing.assert_close(out, torch.nn.functional.leaky_relu(x, 0.2), rtol=0, atol=0)
    assert (rt.path_count("leaky_relu_custom", "kernel"), rt.path_count("leaky_relu_custom", "aten")) == (0, 1)


@pytest.mark.parametrize("shape,dtype", [((4, 10), torch.float32), ((4, 16), torch.float16), ((3, 65536), torch.float32)])
def test_softmax_custom_falls_back_to_aten(shape, dtype):
    # 10 columns are not whole 32-B blocks; float16 is not the kernel's type; one 256 KB row exceeds the UB.
    x = sample(shape, dtype, 4)
    out = nan_like(x)
    ascendc_torch.run("softmax_custom", [x], out)
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))
    assert (rt.path_count("softmax_custom", "kernel"), rt.path_count("softmax_custom", "aten")) == (0, 1)


@pytest.mark.parametrize("kernel, dtype, shapes, attrs", [
    ("add_custom", torch.float16, [(n,), (n,)], {}) for n in (256, 512, 768, 2048, 256 * 1025, 4096)
] + [
    ("leaky_relu_custom", torch.float16, [(n,)], {"negative_slope": 0.2}) for n in (16, 40, 48, 4096 + 16, 70000)
] + [
    ("softmax_custom", torch.float32, [(rows, cols)], {}) for rows, cols in ((3, 8), (9, 12), (17, 16), (2, 6200),
                                                                             (1, 12000))
])
@pytest.mark.parametrize("block_dim", [1, 3, 8])
def test_the_compiled_tiling_decides_as_the_python_one(kernel, dtype, shapes, attrs, block_dim):
    # The bundled kernels are declared like a user's (aot_ops/ascendc/_bundled.py): the tiling function setup.py
    # compiled into the library takes the kernel path exactly where the Python function accepts the shapes.
    from aot_ops.ascendc import _bundled as bundled
    from aot_ops.ascendc._tiling import CannotTile, evaluate

    try:
        evaluate(bundled.KERNELS[kernel].tiling, shapes, block_dim, rt.UB_910B, **attrs)
        expected = "kernel"
    except CannotTile:
        expected = "aten"
    inputs = [sample(shape, dtype, seed) for seed, shape in enumerate(shapes, 1)]
    out = nan_like(inputs[0])
    ascendc_torch.run(kernel, inputs, out, block_dim=block_dim, **attrs)
    assert not torch.isnan(out).any()
    other = "kernel" if expected == "aten" else "aten"
    assert (rt.path_count(kernel, expected), rt.path_count(kernel, other)) == (1, 0)
