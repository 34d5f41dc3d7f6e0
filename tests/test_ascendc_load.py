"""A user's own Ascend C kernel (tests/kernels/ascendc/mul_custom.cpp, not one of the bundled ones) declared once
with aot_ops.ascendc.load, then run from MindSpore (both modes, gradients) and from torch (eager, torch.compile,
torch.library.opcheck), bit-exact in fp16 against numpy in every core order of the emulator; shapes the tiling
refuses run the fallback, counted; a broken variant is stopped by the emulator with a clear RuntimeError."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
import torch

import aot_ops
from aot_ops import ascendc
from aot_ops.ascendc import runtime as rt
from aot_ops.ascendc._tiling import CannotTile, TilingError, evaluate
from aot_ops.testing import OpCheckError, opcheck

pytestmark = pytest.mark.slow  # each test generates, compiles and links a user's Ascend C kernel library

KERNEL_SOURCE = Path(__file__).parent / "kernels" / "ascendc" / "mul_custom.cpp"
ORDERS = ("in_order", "reversed", "threads")


def mul_tiling(x, y, *, block_dim, ub_bytes):
    ascendc.require(x.rank == y.rank, "x and y differ in rank")
    n = x.numel()
    ascendc.require(n == y.numel(), "x and y differ in size")
    ascendc.require(n % (16 * block_dim) == 0, "numel is not a multiple of 16 * block_dim")
    share = n // block_dim
    tile = ascendc.minimum(share, 2048)
    ascendc.require(share % tile == 0, "a core's share is not a whole number of tiles")
    ascendc.require(3 * 2 * tile * 2 <= ub_bytes, "the tiles do not fit the UB")
    return {"totalLength": n, "tileLength": tile}


def declaration() -> dict:
    return {"mul_custom": ascendc.Kernel(inputs=["x", "y"], outputs=["z"], dtypes=["float16"],
                                         scalars={"totalLength": "uint32", "tileLength": "uint32"},
                                         tiling=mul_tiling, fallback="aten::mul.Tensor", output_like={"z": "x"})}


@pytest.fixture(scope="module")
def lib():
    return ascendc.load("test_ascendc_mul", [KERNEL_SOURCE], kernels=declaration())


def halves(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float16)


def test_mindspore_runs_the_kernel_bit_exact_in_both_modes_and_every_core_order(lib):
    mul = lib.mul_custom(block_dim=8)
    a, b = halves((8, 512), 0), halves((8, 512), 1)
    for mode in (ms.PYNATIVE_MODE, ms.GRAPH_MODE):
        ms.set_context(mode=mode)
        try:
            for order in ORDERS:
                rt.reset_path_counts()
                with rt.emulator(order=order):
                    z = mul(ms.Tensor(a), ms.Tensor(b)).asnumpy()
                assert z.dtype == np.float16 and np.array_equal(z, a * b), (mode, order)
                assert rt.path_count("mul_custom", "kernel") == 1 and rt.path_count("mul_custom", "aten") == 0
        finally:
            ms.set_context(mode=ms.PYNATIVE_MODE)


def test_opcheck_passes_every_check(lib):
    a, b = halves((16, 256), 2), halves((16, 256), 3)
    report = opcheck(lib.mul_custom(block_dim=4), [(torch.from_numpy(a), torch.from_numpy(b))], torch.mul,
                     exact=True, core_orders=True)
    for check in ("pynative", "graph_static", "graph_dynamic", "gradient", "empty", "non_contiguous", "core_orders"):
        assert report.passed(check) == 1, report


def test_shapes_the_tiling_refuses_run_the_fallback_and_are_counted(lib):
    mul = lib.mul_custom(block_dim=8)
    cases = [((5, 7), "numel"), ((8, 3000), "whole number of tiles")]  # 35 elements; shares of 3000 > 2048 tiles
    for shape, _ in cases:
        a, b = halves(shape, 4), halves(shape, 5)
        rt.reset_path_counts()
        z = mul(ms.Tensor(a), ms.Tensor(b)).asnumpy()
        np.testing.assert_array_equal(z, a * b)
        assert rt.path_count("mul_custom", "aten") == 1 and rt.path_count("mul_custom", "kernel") == 0
        # The Python run of the same tiling function agrees with the compiled one.
        with pytest.raises(CannotTile):
            evaluate(mul_tiling, [shape, shape], 8, rt.UB_910B)
    # float32 is not a dtype the kernel runs: the fallback, in float32.
    x = np.ones((8, 256), np.float32)
    rt.reset_path_counts()
    assert mul(ms.Tensor(x), ms.Tensor(x)).asnumpy().dtype == np.float32
    assert rt.path_count("mul_custom", "aten") == 1
    # A tileable shape, in Python: the values the C++ tiling launched with.
    assert evaluate(mul_tiling, [(8, 512), (8, 512)], 8, rt.UB_910B) == {"totalLength": 4096, "tileLength": 512}


def test_gradients_come_from_the_fallback(lib):
    mul = lib.mul_custom(block_dim=8)
    a, b = halves((4, 512), 6), halves((4, 512), 7)
    da, db = ms.grad(lambda x, y: mul(x, y).sum(), grad_position=(0, 1))(ms.Tensor(a), ms.Tensor(b))
    np.testing.assert_array_equal(da.asnumpy(), b)
    np.testing.assert_array_equal(db.asnumpy(), a)


def test_torch_eager_compile_and_library_opcheck(lib):
    op = torch.ops.test_ascendc_mul.mul_custom
    a, b = torch.from_numpy(halves((8, 512), 8)), torch.from_numpy(halves((8, 512), 9))
    expected = torch.from_numpy(a.numpy() * b.numpy())
    for order in ORDERS:
        rt.reset_path_counts()
        with rt.emulator(order=order):
            assert torch.equal(op(a, b), expected)
        assert rt.path_count("mul_custom", "kernel") == 1
    compiled = torch.compile(lambda x, y: op(x, y, block_dim=4) * 2, backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(a, b), expected * 2)
    torch.library.opcheck(op.default, (a, b))
    torch.library.opcheck(op.default, (a.float(), b.float()), {"block_dim": 2})  # the fallback path
    x = a.float().requires_grad_()
    op(x, b.float()).sum().backward()
    assert torch.equal(x.grad, b.float())


def test_a_broken_kernel_is_stopped_by_the_emulator_with_a_clear_error():
    broken = ascendc.load("test_ascendc_mul_broken", [KERNEL_SOURCE], kernels=declaration(),
                          extra_cflags=["-DMUL_CUSTOM_BROKEN"])
    mul = broken.mul_custom(block_dim=8)
    a = halves((8, 512), 10)
    for _ in range(2):  # the error is raised every time, and the process goes on
        with pytest.raises(RuntimeError, match=r"(?s)mul_custom.*DataCopy.*32"):
            mul(ms.Tensor(a), ms.Tensor(a)).asnumpy()
    with pytest.raises(RuntimeError, match=r"(?s)mul_custom.*DataCopy"):
        torch.ops.test_ascendc_mul_broken.mul_custom(torch.from_numpy(a), torch.from_numpy(a))
    # A shape the tiling refuses never reaches the broken kernel: the fallback answers.
    c = halves((3, 5), 11)
    np.testing.assert_array_equal(mul(ms.Tensor(c), ms.Tensor(c)).asnumpy(), c * c)


def test_compile_errors_name_the_users_kernel_file_and_line(tmp_path):
    source = tmp_path / "bad_kernel.cpp"
    source.write_text(KERNEL_SOURCE.read_text().replace("Mul(c, a, b, tile_);", "Mul(c, a, b, tile_)  // no ;"))
    line = next(i for i, text in enumerate(source.read_text().splitlines(), 1) if "// no ;" in text)
    with pytest.raises(aot_ops.BuildError, match=rf"bad_kernel\.cpp:{line + 1}|bad_kernel\.cpp:{line}"):
        ascendc.load("test_ascendc_bad", [source], kernels=declaration())


def test_tiling_functions_that_cannot_be_compiled_say_why(tmp_path):
    def branching(x, y, *, block_dim, ub_bytes):
        if x.numel() > 4096:
            return {"totalLength": 4096, "tileLength": 1}
        return {"totalLength": x.numel(), "tileLength": 1}

    def missing(x, y, *, block_dim, ub_bytes):
        return {"totalLength": x.numel()}

    for tiling, message in ((branching, "cannot branch on a size"), (missing, "tileLength")):
        kernels = {"mul_custom": ascendc.Kernel(inputs=["x", "y"], outputs=["z"], dtypes=["float16"],
                                                scalars={"totalLength": "uint32", "tileLength": "uint32"},
                                                tiling=tiling, fallback="aten::mul.Tensor")}
        with pytest.raises(TilingError, match=message):
            ascendc.load("test_ascendc_untraceable", [KERNEL_SOURCE], kernels=kernels)


def test_the_npu_project_is_generated_and_refuses_to_build_without_cann(lib, tmp_path):
    cmake = (lib.npu_project / "CMakeLists.txt").read_text()
    host = (lib.npu_project / "host_launch.cpp").read_text()
    assert "ascendc_library(test_ascendc_mul_kernels" in cmake and str(KERNEL_SOURCE) in cmake
    assert "ACLRT_LAUNCH_KERNEL(mul_custom)" in host and "tile_mul_custom" in host
    # No CANN here: the host launcher is compiled against stand-ins of CANN's two headers, with a launch macro
    # that records the arguments, and run: the compiled tiling gives what the Python one gives.
    stubs = tmp_path / "stubs"
    (stubs / "acl").mkdir(parents=True)
    (stubs / "acl" / "acl.h").write_text("#pragma once\n")
    (stubs / "aclrtlaunch_mul_custom.h").write_text(
        "#pragma once\n#include <cstdint>\n#include <cstdio>\n"
        "#define ACLRT_LAUNCH_KERNEL(k) launch_##k\n"
        "inline void launch_mul_custom(uint32_t bd, void *, void *, void *, void *, uint32_t n, uint32_t t) {\n"
        "  std::printf(\"%u %u %u\\n\", bd, n, t);\n}\n")
    (tmp_path / "main.cpp").write_text(
        '#include <cstdint>\nextern "C" int mul_custom_launch(void *, void **, const int64_t *const *, '
        "const int *, int64_t, int64_t, const double *);\n"
        "int main() {\n  void *buffers[3] = {};\n  int64_t a[2] = {8, 512}, b[2] = {3, 5};\n"
        "  const int64_t *shapes[2] = {a, a}, *odd[2] = {b, b};\n  int ndims[2] = {2, 2};\n"
        "  return mul_custom_launch(nullptr, buffers, shapes, ndims, 8, 196608, nullptr) * 10 +\n"
        "         mul_custom_launch(nullptr, buffers, odd, ndims, 8, 196608, nullptr);\n}\n")
    binary = tmp_path / "host_launch"
    subprocess.run(["g++", "-std=c++17", f"-I{stubs}", str(lib.npu_project / "host_launch.cpp"),
                    str(tmp_path / "main.cpp"), "-o", str(binary)], check=True, capture_output=True, timeout=300)
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    expected = evaluate(mul_tiling, [(8, 512), (8, 512)], 8, rt.UB_910B)
    assert run.stdout.split() == ["8", str(expected["totalLength"]), str(expected["tileLength"])]
    assert run.returncode == 1  # the first launch ran (0), the second was refused (1)

    env = {k: v for k, v in __import__("os").environ.items() if k != "ASCEND_HOME_PATH"}
    proc = subprocess.run([sys.executable, "-m", "aot_ops.ascendc.npu", "--project", str(lib.npu_project),
                           "--build-dir", str(tmp_path / "build")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode == 2 and "CANN not found" in proc.stderr


def test_opcheck_reports_a_wrong_operator():
    wrong = aot_ops.aten.op("aten::add.Tensor")  # checked against mul: every output check fails
    x = torch.randn(4, 3)
    with pytest.raises(OpCheckError, match="pynative") as info:
        opcheck(wrong, [(x, x)], torch.mul, gradients=False)
    assert "graph_static" in str(info.value)


def test_bad_calls_raise_clear_errors_and_the_next_call_works(lib):
    mul = lib.mul_custom(block_dim=8)
    a = halves((4, 256), 12)
    with pytest.raises(TypeError, match="MulCustom: expected 2 input"):
        mul(ms.Tensor(a))
    # output_like says z has x's shape; a y that broadcasts x to more rows contradicts it: an error, not a crash.
    with pytest.raises(RuntimeError, match=r"MulCustom: aten::mul.Tensor gives output 0 as Half \[4, 256\], the "
                                           r"operator's output is Half \[256\]"):
        mul(ms.Tensor(a[0]), ms.Tensor(a)).asnumpy()
    with pytest.raises(RuntimeError, match="blockDim 70000 is outside"):
        big = halves((70000 * 16,), 13)
        lib.mul_custom(block_dim=70000)(ms.Tensor(big), ms.Tensor(big)).asnumpy()
    np.testing.assert_array_equal(mul(ms.Tensor(a), ms.Tensor(a)).asnumpy(), a * a)


def leaky_tiling(x, *, block_dim, ub_bytes, negative_slope):
    n = x.numel()
    ascendc.require(n % (16 * block_dim) == 0, "numel is not a multiple of 16 * block_dim")
    ascendc.require(2 * (n // block_dim) * 2 <= ub_bytes, "a core's share does not fit the UB")
    return {"totalLength": n, "negativeSlope": negative_slope}


@pytest.fixture(scope="module")
def leaky_lib():
    return ascendc.load("test_ascendc_leaky", [KERNEL_SOURCE.parent / "leaky_custom.cpp"], kernels={
        "leaky_custom": ascendc.Kernel(inputs=["x"], outputs=["y"], dtypes=["float16"],
                                       scalars={"totalLength": "uint32", "negativeSlope": "float32"},
                                       tiling=leaky_tiling, fallback="aten::leaky_relu",
                                       output_like={"y": "x"}, attrs={"negative_slope": 0.01})})


def test_an_attribute_reaches_the_kernel_the_fallback_and_torch(leaky_lib):
    x = halves((8, 64), 14)
    expected = np.maximum(x, x * np.float16(0.3))  # the kernel's fp16 arithmetic
    leaky = leaky_lib.leaky_custom(negative_slope=0.3, block_dim=4)
    for order in ORDERS:
        rt.reset_path_counts()
        with rt.emulator(order=order):
            np.testing.assert_array_equal(leaky(ms.Tensor(x)).asnumpy(), expected)
            assert torch.equal(torch.ops.test_ascendc_leaky.leaky_custom(torch.from_numpy(x), 0.3, block_dim=4),
                               torch.from_numpy(expected))
        assert rt.path_count("leaky_custom", "kernel") == 2
    # The fallback gets the attribute too: aten::leaky_relu(x, negative_slope=0.3), in float32.
    y = np.random.default_rng(15).standard_normal((3, 5)).astype(np.float32)
    rt.reset_path_counts()
    got = leaky(ms.Tensor(y)).asnumpy()
    torch.testing.assert_close(torch.from_numpy(got), torch.nn.functional.leaky_relu(torch.from_numpy(y), 0.3))
    assert rt.path_count("leaky_custom", "aten") == 1
    # Gradients come from the fallback with the same slope, in MindSpore and in torch.
    dx = ms.grad(lambda v: leaky(v).sum())(ms.Tensor(y)).asnumpy()
    np.testing.assert_allclose(dx, np.where(y > 0, 1.0, 0.3), rtol=1e-6)
    t = torch.from_numpy(y).requires_grad_()
    torch.ops.test_ascendc_leaky.leaky_custom(t, 0.3).sum().backward()
    torch.testing.assert_close(t.grad, torch.where(t > 0, 1.0, 0.3))
    torch.library.opcheck(torch.ops.test_ascendc_leaky.leaky_custom.default, (torch.from_numpy(x), 0.3))
    with pytest.raises(TypeError, match="unknown attribute"):
        leaky_lib.leaky_custom(slope=0.3)


def test_float_attributes_only_pass_through_the_tiling(tmp_path):
    def computing(x, *, block_dim, ub_bytes, negative_slope):
        return {"totalLength": x.numel(), "negativeSlope": negative_slope * 2}

    kernels = {"leaky_custom": ascendc.Kernel(inputs=["x"], outputs=["y"], dtypes=["float16"],
                                              scalars={"totalLength": "uint32", "negativeSlope": "float32"},
                                              tiling=computing, fallback="aten::leaky_relu",
                                              attrs={"negative_slope": 0.01})}
    with pytest.raises(TilingError, match="can only be returned"):
        ascendc.load("test_ascendc_leaky_computing", [KERNEL_SOURCE.parent / "leaky_custom.cpp"], kernels=kernels)


def test_fallback_arguments_given_as_constants():
    def quarter_tiling(x, *, block_dim, ub_bytes):
        n = x.numel()
        ascendc.require(n % (16 * block_dim) == 0, "numel is not a multiple of 16 * block_dim")
        ascendc.require(2 * (n // block_dim) * 2 <= ub_bytes, "a core's share does not fit the UB")
        return {"totalLength": n, "negativeSlope": 0.25}

    lib = ascendc.load("test_ascendc_quarter", [KERNEL_SOURCE.parent / "leaky_custom.cpp"], kernels={
        "leaky_custom": ascendc.Kernel(inputs=["x"], outputs=["y"], dtypes=["float16"],
                                       scalars={"totalLength": "uint32", "negativeSlope": "float32"},
                                       tiling=quarter_tiling, fallback="aten::leaky_relu",
                                       fallback_args={"negative_slope": 0.25})})
    op = lib.leaky_custom(block_dim=2)
    x = halves((4, 32), 16)
    rt.reset_path_counts()
    np.testing.assert_array_equal(op(ms.Tensor(x)).asnumpy(), np.maximum(x, x * np.float16(0.25)))
    y = np.random.default_rng(17).standard_normal((3, 5)).astype(np.float32)  # the fallback, with the constant
    expected = torch.nn.functional.leaky_relu(torch.from_numpy(y), 0.25)
    torch.testing.assert_close(torch.from_numpy(op(ms.Tensor(y)).asnumpy()), expected)
    torch.testing.assert_close(torch.ops.test_ascendc_quarter.leaky_custom(torch.from_numpy(y)), expected)
    assert rt.path_count("leaky_custom", "kernel") == 1 and rt.path_count("leaky_custom", "aten") == 2
    with pytest.raises(ValueError, match="has no argument slope"):
        ascendc.load("test_ascendc_quarter", [KERNEL_SOURCE.parent / "leaky_custom.cpp"], kernels={
            "leaky_custom": ascendc.Kernel(inputs=["x"], outputs=["y"], dtypes=["float16"],
                                           scalars={"totalLength": "uint32", "negativeSlope": "float32"},
                                           tiling=quarter_tiling, fallback="aten::leaky_relu",
                                           fallback_args={"slope": 0.25})})


def test_without_output_like_the_fallback_infers_static_shapes_and_says_what_dynamic_ones_need():
    import dataclasses

    kernels = {"mul_custom": dataclasses.replace(declaration()["mul_custom"], output_like=None)}
    lib = ascendc.load("test_ascendc_mul_inferred", [KERNEL_SOURCE], kernels=kernels)
    a, b = (torch.from_numpy(halves((8, 512), seed)) for seed in (0, 1))
    report = opcheck(lib.mul_custom(block_dim=8), [(a, b)], torch.mul, exact=True, raise_on_failure=False)
    assert report.name == "MulCustom"
    for check in ("pynative", "graph_static", "gradient", "non_contiguous"):
        assert report.passed(check) == 1, report
    (dynamic,) = [r for r in report.results if r.check == "graph_dynamic"]
    assert dynamic.status == "failed" and "Declare output_like in the ascendc.Kernel of mul_custom" in dynamic.detail
