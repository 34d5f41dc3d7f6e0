"""The GPU side: the CUDA builds of the bundled kernels and the custom add2 kernel, for MindSpore and PyTorch.

On a machine with a CUDA build of torch, nvcc and TORCH_CUDA_ARCH_LIST set, add2 is reachable three ways:
- JIT: `aot_ops.cuda.add2_library()` (aot_ops.load of kernels/cuda: add2.cu, the kernel, and add2_ops.cpp, its
  MindSpore entry and PyTorch operator; cached);
- setuptools: `pip install --no-build-isolation -e .` also builds aot_ops/lib/libaot_ops_cuda.so
  (`aot_ops.library_path("cuda")`), which holds add2 and the CUDA variants of every bundled kernel (LeakyRelu, Add, Mul,
  Matmul, Softmax, ..., AtenOp);
- CMake: kernels/cuda/CMakeLists.txt (find_package(Torch)).
Each gives the MindSpore aot entry `Add2` and the PyTorch operator torch.ops.aot_ops_cuda.add2 (its fake
implementation is registered here, for torch.compile).
"""
from __future__ import annotations

import functools

from .._native.paths import source_dir


@functools.lru_cache(maxsize=None)
def add2_library():
    """add2 built just in time with aot_ops.load (cached across processes)."""
    from .._build import cuda
    from .._core.library import load

    kernels = source_dir("kernels") / "cuda"
    return load("add2", [kernels / "add2_ops.cpp", kernels / "add2.cu"], extra_include_paths=[kernels],
                extra_cflags=cuda.host_cflags())


def add2(library=None):
    """out = a + b on the GPU (float32, float16) as a MindSpore operator, from `library` (a path or a Library;
    default: the JIT build)."""
    from .._core.opdef import OpDef

    lib = library if library is not None else add2_library()
    path = lib.path if hasattr(lib, "path") else lib
    return OpDef(path, "Add2").build()


def load_torch_op(library) -> None:
    """Loads a library holding add2 into this process, which registers torch.ops.aot_ops_cuda.add2, and adds the
    fake implementation torch.compile traces with.

    Through the one opener: MS_CUSTOM_AOT_WHITE_LIST is honoured before the library's constructors run, and the
    handle is the one MindSpore's loads share. Registering a torch operator needs no RTLD_GLOBAL."""
    import torch

    from .._native.opener import open_library

    open_library(library.path if hasattr(library, "path") else library)
    _register_fake(torch)


@functools.lru_cache(maxsize=None)
def _register_fake(torch) -> None:
    @torch.library.register_fake("aot_ops_cuda::add2")
    def _(a, b):
        torch._check(a.shape == b.shape, lambda: "add2: a and b must have the same shape")
        torch._check(a.dtype == b.dtype, lambda: "add2: a and b must have the same dtype")
        return torch.empty_like(a, memory_format=torch.contiguous_format)
