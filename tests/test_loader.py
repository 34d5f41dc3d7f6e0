"""aot_ops.load / load_inline: building user kernels at run time and running them in MindSpore."""
from __future__ import annotations

import subprocess
import textwrap

import numpy as np
import pytest

import aot_ops
from aot_ops._build import cuda
from aot_ops._build.progress import progress
from loader_support import write_plain_add
from support import OpCell, to_torch

# A kernel that needs a scratch buffer: MindSpore only passes workspaces (after the outputs) when the Init hook
# asks for them, here through ms_ext's C API, which every library links.
WORKSPACE_KERNEL = textwrap.dedent("""\
    #include <cstdint>
    #include <ms_ext/c_api.h>

    static int64_t element_count(int ndim, const int64_t *shape) {
      int64_t n = 1;
      for (int d = 0; d < ndim; ++d) n *= shape[d];
      return n;
    }

    extern "C" int TwicePlusOneInit(int *ndims, int64_t **shapes, const char **, void *extra) {
      size_t bytes = element_count(ndims[0], shapes[0]) * sizeof(float);
      return ms_ext_extra_set_workspace(static_cast<ms_ext_extra *>(extra), &bytes, 1);
    }

    extern "C" int TwicePlusOne(int nparam, void **params, int *ndims, int64_t **shapes, const char **, void *,
                                void *) {
      if (nparam != 3 || params[2] == nullptr) return 1;  // input, output, workspace
      int64_t n = element_count(ndims[0], shapes[0]);
      auto *x = static_cast<const float *>(params[0]);
      auto *out = static_cast<float *>(params[1]);
      auto *scratch = static_cast<float *>(params[2]);
      for (int64_t i = 0; i < n; ++i) scratch[i] = 2 * x[i];
      for (int64_t i = 0; i < n; ++i) out[i] = scratch[i] + 1;
      return 0;
    }
""")


def linked_libraries(path) -> str:
    return subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout


def test_plain_add_runs_in_mindspore(aot_cache, tmp_path, mode):
    import mindspore as ms

    lib = aot_ops.load("plain_add", [write_plain_add(tmp_path / "src")])
    add = lib.op("PlainAdd", out_shape=lambda a, b: a, out_dtype=lambda a, b: a)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = OpCell(add)(ms.Tensor(a), ms.Tensor(a * 10))
    np.testing.assert_array_equal(to_torch(out).numpy(), a * 11)


def test_op_given_mindspore_rules_is_an_aot_op_on_the_fast_front(aot_cache, tmp_path):
    """Library.op with ops.Custom-style out_shape/out_dtype makes an AotOp like every other path: its PyNative calls
    take the fast front (planned once per input signature with the user's rules), which a plain ops.Custom skips."""
    import mindspore as ms

    from aot_ops._core import front

    lib = aot_ops.load("plain_add", [write_plain_add(tmp_path / "src")])
    add = lib.op("PlainAdd", out_shape=lambda a, b: a + [], out_dtype=lambda a, b: a)  # a rule may build lists
    assert isinstance(add, aot_ops.AotOp)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    for scale in (10, 100):  # the second call reuses the front's plan
        out = add(ms.Tensor(a), ms.Tensor(a * scale))
        np.testing.assert_array_equal(out.asnumpy(), a * (scale + 1))
    if front.active():
        assert add.__dict__.get("_front") is not None


def test_kernel_with_a_workspace_runs_in_mindspore(aot_cache, mode):
    import mindspore as ms

    lib = aot_ops.load_inline("twice_plus_one", WORKSPACE_KERNEL)
    op = lib.op("TwicePlusOne", out_shape=lambda x: x, out_dtype=lambda x: x)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    out = OpCell(op)(ms.Tensor(x))
    np.testing.assert_allclose(to_torch(out).numpy(), 2 * x + 1)


def test_plain_kernels_do_not_link_torch(aot_cache):
    lib = aot_ops.load_inline("twice_plus_one", WORKSPACE_KERNEL)
    needed = linked_libraries(lib.path)
    assert "NEEDED" in needed and "torch" not in needed and "c10" not in needed


@pytest.mark.slow  # compiles a kernel library: 7 s
def test_kernel_with_ms_ext_rules_needs_no_out_shape(aot_cache, tmp_path):
    """A torch kernel with shape and dtype rules becomes an AotOp (C++ inference, dynamic shapes)."""
    import mindspore as ms

    source = tmp_path / "triple.cpp"
    source.write_text(textwrap.dedent("""\
        #include <ATen/ops/mul.h>
        #include <ms_ext/ms_ext.h>
        MS_EXT_KERNEL(Triple, ms_ext::Signature().inputs(1).outputs(1).dtypes(ms_ext::floating_types())
                                  .shapes(ms_ext::same_shape_as_input0).types(ms_ext::same_type_as_input0)) {
          at::mul_out(call.output(0), call.input(0), 3);
        }
    """))
    lib = aot_ops.load("triple", [source])
    assert "libtorch" in linked_libraries(lib.path)
    op = lib.op("Triple")
    assert isinstance(op, aot_ops.AotOp)
    x = np.array([[1.0, -2.0]], dtype=np.float32)
    np.testing.assert_array_equal(op(ms.Tensor(x)).asnumpy(), 3 * x)


def test_unknown_entry_point_is_reported_when_the_operator_is_made(aot_cache, tmp_path):
    lib = aot_ops.load("plain_add", [write_plain_add(tmp_path / "src")])
    with pytest.raises(AttributeError, match="no entry point 'PlainAd'"):
        lib.op("PlainAd", out_shape=lambda a, b: a, out_dtype=lambda a, b: a)


def test_syntax_error_shows_file_line_and_compiler_message(aot_cache, tmp_path):
    source = tmp_path / "broken_kernel.cpp"
    source.write_text('#include <cstdint>\n\nextern "C" int Broken() {\n  int x = ;\n  return x;\n}\n')
    with pytest.raises(aot_ops.BuildError) as info:
        aot_ops.load("broken", [source])
    text = str(info.value)
    assert f"{source}:4:" in text and "expected primary-expression" in text
    assert info.value.log_path.is_file() and f"full log: {info.value.log_path}" in text
    # the process carries on: fix the file and load again
    source.write_text('#include <cstdint>\n\nextern "C" int Broken() {\n  int x = 1;\n  return x;\n}\n')
    assert aot_ops.load("broken", [source]).loadable


def test_load_inline_errors_point_at_the_written_source(aot_cache):
    with pytest.raises(aot_ops.BuildError) as info:
        aot_ops.load_inline("inline_broken", "#include <cstdint>\nint f() {\n  return undeclared_name;\n}\n")
    written = aot_cache / "inline_broken" / "inline" / "inline_broken.cpp"
    assert f"{written}:3:" in str(info.value) and "undeclared_name" in str(info.value)
    assert written.read_text().splitlines()[2] == "  return undeclared_name;"


def test_link_errors_name_the_missing_symbol(aot_cache):
    with pytest.raises(aot_ops.BuildError, match="link failed") as info:
        aot_ops.load_inline("unresolved", 'extern "C" int missing_helper();\n'
                                          'extern "C" int Calls() { return missing_helper(); }\n')
    assert "missing_helper" in str(info.value)


def test_missing_source_is_reported_before_building(aot_cache, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.cpp"):
        aot_ops.load("nowhere", [tmp_path / "nowhere.cpp"])


def test_slow_builds_print_progress(capsys):
    import time

    with progress("libslow", show_after=0.0, every=0.05):
        time.sleep(0.2)
    err = capsys.readouterr().err
    assert "aot_ops: building libslow... 0s" in err and "aot_ops: libslow finished after" in err


# ---- CUDA -------------------------------------------------------------------------------------------------------

SCALE_CU = textwrap.dedent("""\
    #include <cstdint>
    #include <cuda_runtime.h>
    __global__ void scale_kernel(const float *x, float *y, int64_t n) {
      int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
      if (i < n) y[i] = 2.0f * x[i];
    }
    extern "C" int Scale(int, void **params, int *ndims, int64_t **shapes, const char **, void *stream, void *) {
      int64_t n = 1;
      for (int d = 0; d < ndims[0]; ++d) n *= shapes[0][d];
      scale_kernel<<<(n + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(
          static_cast<const float *>(params[0]), static_cast<float *>(params[1]), n);
      return cudaGetLastError() == cudaSuccess ? 0 : 1;
    }
""")

needs_nvcc = pytest.mark.skipif(cuda.nvcc() is None, reason="nvcc is not installed")


@pytest.fixture
def scale_cu(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0+PTX")
    source = tmp_path / "scale.cu"
    source.write_text(SCALE_CU)
    return source


@needs_nvcc
def test_cuda_source_compiles_with_nvcc_for_the_listed_architectures(aot_cache, scale_cu):
    aot_ops.load("scale", [scale_cu])
    build = aot_cache / "scale" / "build"
    objects = list((build / "obj").glob("*_scale.o"))
    assert len(objects) == 1
    sections = subprocess.run(["readelf", "-S", str(objects[0])], capture_output=True, text=True).stdout
    assert ".nv_fatbin" in sections  # device code is embedded: nvcc compiled it, not the host compiler
    assert b"sm_90" in objects[0].read_bytes()
    commands = (build / "build.ninja").read_text()
    assert "-gencode=arch=compute_90,code=sm_90" in commands and "code=compute_90" in commands


@needs_nvcc
def test_cuda_library_loads(aot_cache, scale_cu):
    lib = aot_ops.load("scale", [scale_cu])
    if not lib.loadable:
        with pytest.raises(RuntimeError, match="cannot be loaded here"):
            lib.op("Scale", out_shape=lambda x: x, out_dtype=lambda x: x)
        pytest.skip(f"CUDA library compiled but not linked or load-checked: {lib.reason}")
    assert "libcudart" in linked_libraries(lib.path)


@needs_nvcc
def test_cuda_sources_need_an_architecture_list(aot_cache, scale_cu, monkeypatch):
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST")
    with pytest.raises(cuda.CudaSetupError, match="TORCH_CUDA_ARCH_LIST is not set"):
        aot_ops.load("scale", [scale_cu])


@pytest.mark.parametrize("arch_list, flags", [
    ("9.0", ["-gencode=arch=compute_90,code=sm_90"]),
    ("8.0;9.0+PTX", ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
                     "-gencode=arch=compute_90,code=compute_90"]),
    ("7.5 8.6", ["-gencode=arch=compute_75,code=sm_75", "-gencode=arch=compute_86,code=sm_86"]),
])
def test_architecture_list_becomes_gencode_flags(arch_list, flags):
    assert cuda.arch_flags(arch_list) == flags


def test_unreadable_architecture_list_is_an_error():
    with pytest.raises(cuda.CudaSetupError, match="sm90"):
        cuda.arch_flags("sm90")
