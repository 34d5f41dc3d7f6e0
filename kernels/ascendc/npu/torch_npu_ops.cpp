// The Ascend C kernels as PyTorch operators on a real NPU (torch_npu): the same kernel sources the CPU emulator
// runs, launched with the ACLRT_LAUNCH_KERNEL launchers CANN's ascendc_library generates.
//
//   import torch, torch_npu, ascendc_torch_npu
//   z = torch.ops.ascendc_npu.add_custom(x.npu(), y.npu())     # torch.library (PrivateUse1 = the NPU)
//   z = ascendc_torch_npu.add_custom(x.npu(), y.npu())         # pybind
//
// Preconditions are those of the CPU path (kernels/ascendc/tiling); on the NPU there is no ATen fallback here:
// a call outside them fails with the reason, rather than running a kernel that would leave tails unwritten.
#include <torch/extension.h>

#include "torch_npu/csrc/core/npu/NPUStream.h"

#include "aclrtlaunch_add_custom.h"
#include "aclrtlaunch_leaky_relu_custom.h"
#include "aclrtlaunch_softmax_custom.h"

#include "add_custom_tiling.h"
#include "leaky_relu_custom_tiling.h"
#include "softmax_custom_tiling.h"

namespace {

// 910B (A2/A3) Unified Buffer per core; kernels/ascendc/emulator/INVARIANTS.md.
constexpr int64_t kUbBytes = 192 * 1024;

void check_input(const at::Tensor &t, at::ScalarType type, const char *op) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, op, ": expects NPU tensors");
  TORCH_CHECK(t.scalar_type() == type, op, ": expects ", c10::toString(type), ", got ", t.scalar_type());
}

// The stream torch_npu is using now, so the kernel is ordered with the surrounding torch work.
aclrtStream current_stream() { return c10_npu::getCurrentNPUStream().stream(false); }

at::Tensor add_custom(const at::Tensor &x_in, const at::Tensor &y_in, int64_t block_dim) {
  check_input(x_in, at::kHalf, "add_custom");
  check_input(y_in, at::kHalf, "add_custom");
  TORCH_CHECK(x_in.sizes() == y_in.sizes(), "add_custom: x and y must have the same shape");
  const std::string unmet = add_custom_tiling::unmet_precondition(x_in.numel(), block_dim, kUbBytes);
  TORCH_CHECK(unmet.empty(), "add_custom: ", unmet);
  // data_ptr(), not storage().data(): a view's data starts at its storage offset.
  const at::Tensor x = x_in.contiguous(), y = y_in.contiguous();
  at::Tensor z = at::empty_like(x);
  ACLRT_LAUNCH_KERNEL(add_custom)(static_cast<uint32_t>(block_dim), current_stream(), x.data_ptr(), y.data_ptr(),
                                  z.data_ptr(), static_cast<uint32_t>(x.numel()));
  return z;
}

at::Tensor leaky_relu_custom(const at::Tensor &x_in, double negative_slope, int64_t block_dim) {
  check_input(x_in, at::kHalf, "leaky_relu_custom");
  const auto plan = leaky_relu_custom_tiling::plan(x_in.numel(), block_dim, kUbBytes);
  TORCH_CHECK(plan.unmet.empty(), "leaky_relu_custom: ", plan.unmet);
  const at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty_like(x);
  ACLRT_LAUNCH_KERNEL(leaky_relu_custom)(static_cast<uint32_t>(block_dim), current_stream(), x.data_ptr(),
                                         y.data_ptr(), static_cast<uint32_t>(x.numel()), plan.tileLength,
                                         static_cast<float>(negative_slope));
  return y;
}

at::Tensor softmax_custom(const at::Tensor &x_in, int64_t block_dim) {
  check_input(x_in, at::kFloat, "softmax_custom");
  TORCH_CHECK(x_in.dim() >= 1, "softmax_custom: needs rank >= 1");
  const int64_t cols = x_in.size(-1);
  const int64_t rows = cols == 0 ? 0 : x_in.numel() / cols;
  const auto plan = softmax_custom_tiling::plan(rows, cols, block_dim, kUbBytes);
  TORCH_CHECK(plan.unmet.empty(), "softmax_custom: ", plan.unmet);
  const at::Tensor x = x_in.contiguous();
  at::Tensor y = at::empty_like(x);
  ACLRT_LAUNCH_KERNEL(softmax_custom)(static_cast<uint32_t>(block_dim), current_stream(), x.data_ptr(), y.data_ptr(),
                                      static_cast<uint32_t>(rows), static_cast<uint32_t>(cols), plan.tileRows);
  return y;
}

}  // namespace

TORCH_LIBRARY(ascendc_npu, m) {
  m.def("add_custom(Tensor x, Tensor y, int block_dim=8) -> Tensor");
  m.def("leaky_relu_custom(Tensor x, float negative_slope=0.01, int block_dim=8) -> Tensor");
  m.def("softmax_custom(Tensor x, int block_dim=8) -> Tensor");
}

TORCH_LIBRARY_IMPL(ascendc_npu, PrivateUse1, m) {
  m.impl("add_custom", &add_custom);
  m.impl("leaky_relu_custom", &leaky_relu_custom);
  m.impl("softmax_custom", &softmax_custom);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("add_custom", &add_custom, "z = x + y (fp16) on the NPU", py::arg("x"), py::arg("y"), py::arg("block_dim") = 8);
  m.def("leaky_relu_custom", &leaky_relu_custom, "leaky_relu (fp16) on the NPU", py::arg("x"),
        py::arg("negative_slope") = 0.01, py::arg("block_dim") = 8);
  m.def("softmax_custom", &softmax_custom, "softmax over the last dimension (fp32) on the NPU", py::arg("x"),
        py::arg("block_dim") = 8);
}
