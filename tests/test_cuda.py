"""The GPU path: CUDA builds of the kernels, MindSpore's stream, add2.

Here (no GPU, CPU torch) every CUDA translation unit is compiled for TORCH_CUDA_ARCH_LIST=9.0; the tests that need
a GPU run through the harness (MindSpore's seven arguments, a real non-default CUDA stream, buffers from torch) on
a machine with one, and are skipped here with the reason.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from aot_ops._build import builder, bundled, cuda

# Not from support: that imports MindSpore, and a GPU machine may have torch alone (only the last test needs MindSpore).
REPO = Path(__file__).resolve().parent.parent

KERNEL_SOURCES = sorted((REPO / "kernels" / "aten" / "cpu").glob("*.cpp")) + \
    sorted((REPO / "kernels" / "aten" / "generic").glob("*.cpp"))
ADD2_KERNEL = REPO / "kernels" / "cuda" / "add2.cu"  # device code, nvcc
ADD2_OPS = REPO / "kernels" / "cuda" / "add2_ops.cpp"  # its MindSpore entry and PyTorch operator, C++ compiler
ADD2 = [ADD2_OPS, ADD2_KERNEL]
ENTRIES = ["LeakyRelu", "Add", "Mul", "Matmul", "Softmax", "AtenOp", "AtenOpBackward"]

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(),
                               reason="no CUDA device here (CPU build of torch, no GPU): run on a GPU machine")
needs_nvcc = pytest.mark.skipif(cuda.nvcc() is None, reason="nvcc is not installed")


def cuda_spec(name: str, kernel_units: list[Path]) -> builder.LibrarySpec:
    return builder.LibrarySpec(name=name, sources=[*ADD2, *kernel_units], extra_include_paths=[ADD2_KERNEL.parent],
                               extra_cflags=cuda.host_cflags())


@pytest.fixture(scope="module")
def cuda_objects(tmp_path_factory):
    """Every CUDA translation unit compiled (not linked) for sm_90: add2.cu with nvcc, add2_ops.cpp and the bundled
    kernels with CUDA placement against the CUDA runtime headers and torch's c10/cuda headers, in the units setup.py
    compiles."""
    build_dir = tmp_path_factory.mktemp("cuda_build")
    units = bundled.aten_kernel_units(REPO / "kernels", build_dir / "generated")
    old = os.environ.get("TORCH_CUDA_ARCH_LIST")
    os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
    try:
        return builder.build_objects(cuda_spec("cuda_check", units), build_dir)
    finally:
        if old is None:
            del os.environ["TORCH_CUDA_ARCH_LIST"]
        else:
            os.environ["TORCH_CUDA_ARCH_LIST"] = old


def symbols(obj: Path) -> str:
    return subprocess.run(["nm", "-C", str(obj)], capture_output=True, text=True, check=True).stdout


@pytest.mark.slow  # nvcc and every kernel compiled for sm_90
@needs_nvcc
def test_add2_compiles_with_nvcc_for_sm90(cuda_objects):
    kernel = next(o for o in cuda_objects if o.name.endswith("_add2.o"))
    sections = subprocess.run(["readelf", "-S", str(kernel)], capture_output=True, text=True).stdout
    assert ".nv_fatbin" in sections  # device code was generated
    table = symbols(kernel)
    assert "add2::add2_vectorised" in table  # the kernel's host stub
    # the launches add2.h declares, for both types, defined here for the bindings to call
    for dtype in ("float", "__half"):  # (explicit instantiations: weak symbols)
        assert re.search(rf" [TW] cudaError add2::launch<{dtype}>\(", table), dtype
    ops = symbols(next(o for o in cuda_objects if o.name.endswith("_add2_ops.o")))
    assert " T Add2" in ops and " T ms_ext_signature_Add2" in ops
    assert " U cudaError add2::launch<float>(" in ops  # the bindings call the kernel's launch, compiled elsewhere


@pytest.mark.slow  # nvcc and every kernel compiled for sm_90
@needs_nvcc
def test_bundled_kernels_compile_with_cuda_placement(cuda_objects):
    defined = "".join(symbols(o) for o in cuda_objects)
    for entry in ENTRIES:
        assert f" T {entry}\n" in defined, entry
    # The CUDA placement is what the CPU build lacks: MindSpore's stream wrapped as torch's current stream.
    assert "c10::cuda::getStreamFromExternal" in defined


def test_missing_arch_list_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    with pytest.raises(cuda.CudaSetupError, match="TORCH_CUDA_ARCH_LIST is not set"):
        cuda.arch_flags()


def test_add2_torch_operator_has_a_fake_implementation():
    """torch.compile traces add2 through its fake implementation (registered in Python, needs no GPU)."""
    schema = "add2(Tensor a, Tensor b) -> Tensor"
    assert f'TORCH_LIBRARY(aot_ops_cuda, m) {{ m.def("{schema}"); }}' in ADD2_OPS.read_text()
    # In a fresh process (so the GPU tests can still load the real library): the schema as add2_ops.cpp declares it
    # (that library cannot be loaded without a GPU), then aot_ops' fake implementation on it, run on fake tensors.
    code = textwrap.dedent(f"""
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode
        import aot_ops.cuda
        library = torch.library.Library("aot_ops_cuda", "DEF")
        library.define("{schema}")
        aot_ops.cuda._register_fake(torch)
        with FakeTensorMode():
            a = torch.empty(3, 5, dtype=torch.float16).t()
            out = torch.ops.aot_ops_cuda.add2(a, torch.empty(5, 3, dtype=torch.float16))
            print(tuple(out.shape), out.dtype, out.is_contiguous())
            try:
                torch.ops.aot_ops_cuda.add2(a, torch.empty(3, 5, dtype=torch.float16))
            except RuntimeError as e:
                print("refused:", "add2: a and b must have the same shape" in str(e))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:2] == ["(5, 3) torch.float16 True", "refused: True"]


# ---- on a GPU ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpu_library(tmp_path_factory):
    import aot_ops

    return aot_ops.load("aot_ops_cuda_test", [*ADD2, *KERNEL_SOURCES], extra_include_paths=[ADD2_KERNEL.parent],
                        extra_cflags=cuda.host_cflags())


def cases(device):
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(1000, 257, device=device, generator=g)
    b = torch.randn(1000, 257, device=device, generator=g)
    w = torch.randn(257, 64, device=device, generator=g)
    return [
        ("LeakyRelu", [a], F.leaky_relu(a, 0.01)),
        ("Add", [a, b[:1]], a + b[:1]),
        ("Mul", [a, b], a * b),
        ("Matmul", [a, w], a @ w),
        ("Softmax", [a], torch.softmax(a, -1)),
        ("Add2", [a, b], a + b),
        ("Add2", [a.half(), b.half()], a.half() + b.half()),
        ("Add2", [a.flatten()[1:], b.flatten()[1:]], a.flatten()[1:] + b.flatten()[1:]),  # unaligned: scalar path
    ]


@needs_gpu
def test_every_cuda_entry_matches_torch_on_a_non_default_stream(gpu_library):
    from aot_ops import harness

    stream = torch.cuda.Stream()
    for name, inputs, expected in cases("cuda"):
        inputs = [t.contiguous() for t in inputs]
        out = torch.full_like(expected, float("nan"))
        harness.call(gpu_library.path, name, inputs, [out], stream=stream.cuda_stream)
        stream.synchronize()
        torch.testing.assert_close(out, expected, msg=name)


@needs_gpu
def test_work_is_ordered_on_mindsporess_stream_without_host_sync(gpu_library):
    """A slow kernel writes the input on the stream; the bridged op, launched right after on the same stream with no
    host synchronisation, must see the finished input; reading back on the stream must see the op's result."""
    from aot_ops import harness

    stream = torch.cuda.Stream()
    x = torch.randn(1 << 22, device="cuda")
    a = torch.empty_like(x)
    out = torch.empty_like(x)
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)  # ~ tens of ms of GPU time before `a` is written
        a.copy_(x * 2)
        harness.call(gpu_library.path, "Add2", [a, x], [out], stream=stream.cuda_stream)
        for name in ("LeakyRelu",):
            harness.call(gpu_library.path, name, [out], [a], stream=stream.cuda_stream)
        read_back = a.clone()
    stream.synchronize()
    torch.testing.assert_close(read_back, F.leaky_relu(x * 3, 0.01))


@needs_gpu
def test_mismatched_output_shape_reports_the_error(gpu_library):
    from aot_ops import harness

    a = torch.randn(4, 5, device="cuda")
    with pytest.raises(harness.AotCallError, match=r"Add2: output 0 has shape \[5, 4\]"):
        harness.call(gpu_library.path, "Add2", [a, a], [torch.empty(5, 4, device="cuda")])


@needs_gpu
@pytest.mark.skipif(shutil.which("compute-sanitizer") is None, reason="compute-sanitizer is not installed")
def test_compute_sanitizer_finds_no_error_in_the_entry_points(gpu_library):
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {str(REPO / 'tests')!r})
        from aot_ops import harness
        from test_cuda import cases
        stream = torch.cuda.Stream()
        for name, inputs, expected in cases("cuda"):
            out = torch.empty_like(expected)
            harness.call({str(gpu_library.path)!r}, name, [t.contiguous() for t in inputs], [out],
                         stream=stream.cuda_stream)
        stream.synchronize()
        print("done")
    """)
    proc = subprocess.run(["compute-sanitizer", "--error-exitcode", "1", sys.executable, "-c", script],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ERROR SUMMARY: 0 errors" in proc.stdout


@pytest.mark.parametrize("target", ["CPU", "GPU"])
def test_reg_info_declares_the_device_the_operator_runs_on(monkeypatch, target):
    """A CUDA kernel's primitive must register for GPU: the reg_info target follows MindSpore's device target."""
    import mindspore as ms

    from aot_ops._core import primitive as _primitive
    from aot_ops._core.arity import Arity

    real = ms.get_context
    monkeypatch.setattr(ms, "get_context", lambda key: target if key == "device_target" else real(key))
    assert _primitive._reg_info("LeakyRelu", Arity(1, 1))["target"] == target
