// add2's launcher as host code sees it: declared here for add2_ops.cpp (the MindSpore entry and the PyTorch operator,
// compiled by the C++ compiler against torch's headers), defined for float and __half in add2.cu (compiled by nvcc
// with no torch header: nvcc never parses torch, which kept a one-kernel file compiling for half a minute).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace add2 {

// out = a + b over n elements, launched on `stream`; returns the launch's error.
template <typename T>
cudaError_t launch(const T *a, const T *b, T *out, int64_t n, cudaStream_t stream);

extern template cudaError_t launch<float>(const float *, const float *, float *, int64_t, cudaStream_t);
extern template cudaError_t launch<__half>(const __half *, const __half *, __half *, int64_t, cudaStream_t);

}  // namespace add2
