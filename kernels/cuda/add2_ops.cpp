// add2 as a MindSpore aot entry point (Add2) and as a PyTorch operator (torch.ops.aot_ops_cuda.add2), from one
// kernel (add2.cu, launched through add2.h). Host code only, built by the C++ compiler for CUDA placement
// (-DMS_EXT_TARGET_CUDA and the CUDA headers: aot_ops._build.cuda.host_cflags) so ms_ext views MindSpore's buffers
// as CUDA tensors and makes MindSpore's stream the current one.
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <ms_ext/ms_ext.h>

#include "add2.h"

namespace {

constexpr ms_ext::DtypeSet kAdd2Types = {at::kFloat, at::kHalf};

void run_add2(const at::Tensor &a, const at::Tensor &b, at::Tensor &out) {
  TORCH_CHECK(a.sizes() == b.sizes(), "add2: a and b must have the same shape, got ", a.sizes(), " and ",
              b.sizes());
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "add2: a and b must have the same dtype");
  TORCH_CHECK(a.is_cuda() && b.is_cuda(), "add2: tensors must be on a CUDA device");
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();  // MindSpore's stream inside an aot call
  cudaError_t status;
  if (a.scalar_type() == at::kFloat) {
    status = add2::launch(ca.data_ptr<float>(), cb.data_ptr<float>(), out.data_ptr<float>(), a.numel(), stream);
  } else {
    status = add2::launch(reinterpret_cast<const __half *>(ca.data_ptr<at::Half>()),
                          reinterpret_cast<const __half *>(cb.data_ptr<at::Half>()),
                          reinterpret_cast<__half *>(out.data_ptr<at::Half>()), a.numel(), stream);
  }
  TORCH_CHECK(status == cudaSuccess, "add2: kernel launch failed: ", cudaGetErrorString(status));
}

}  // namespace

// MindSpore: out = Add2(a, b)
MS_EXT_KERNEL(Add2, ms_ext::Signature().inputs(2).outputs(1).dtypes(kAdd2Types)
                        .shapes(ms_ext::same_shape_as_input0).types(ms_ext::same_type_as_input0)) {
  run_add2(call.input(0), call.input(1), call.output(0));
}

// PyTorch: torch.ops.aot_ops_cuda.add2(a, b); the fake (meta) implementation is registered in Python
// (aot_ops/cuda.py) so torch.compile can trace it.
TORCH_LIBRARY(aot_ops_cuda, m) { m.def("add2(Tensor a, Tensor b) -> Tensor"); }

TORCH_LIBRARY_IMPL(aot_ops_cuda, CUDA, m) {
  m.impl("add2", [](const at::Tensor &a, const at::Tensor &b) {
    at::Tensor out = at::empty_like(a, a.options().memory_format(at::MemoryFormat::Contiguous));
    run_add2(a, b, out);
    return out;
  });
}
