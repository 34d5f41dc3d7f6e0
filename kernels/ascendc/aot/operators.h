// The Ascend C operators on CPU tensors: run the kernel on the emulator when its tiling preconditions hold, the
// ATen operator otherwise (never a partial result). Shared by the MindSpore entry points (entries.cpp) and the
// PyTorch entry points (torch_entries.cpp). Tensors are contiguous CPU tensors; `out` is written in place.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace ascendc_aot {

constexpr int64_t kDefaultBlockDim = 8;

// out = x + y (same shape, same dtype). Kernel path: float16 and add_custom's preconditions.
void add_custom(const at::Tensor &x, const at::Tensor &y, const at::Tensor &out, int64_t blockDim);

// out = leaky_relu(x, negativeSlope). Kernel path: float16 with numel a multiple of 16. The kernel applies the
// slope rounded to float16 (vector scalars have the operand's type), so it may differ from ATen in the last bit.
void leaky_relu_custom(const at::Tensor &x, const at::Tensor &out, double negativeSlope, int64_t blockDim);

// out = softmax(x, dim=-1). Kernel path: float32 with the last dimension a multiple of 8.
void softmax_custom(const at::Tensor &x, const at::Tensor &out, int64_t blockDim);

}  // namespace ascendc_aot
