// add2: out = a + b on the GPU, float32 and float16. Vectorised (16-byte loads: 4 floats or 8 halves per thread
// step) over a grid-stride loop, with a scalar loop for the tail the vectors do not cover or when a buffer is not
// 16-byte aligned.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace add2 {

template <typename T>
struct Vec;  // 16 bytes of T
template <> struct Vec<float> { using type = float4; static constexpr int kLanes = 4; };
template <> struct Vec<__half> { using type = uint4; static constexpr int kLanes = 8; };

__device__ inline float4 add_vec(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

__device__ inline uint4 add_vec(uint4 a, uint4 b) {
  uint4 out;
  const __half2 *pa = reinterpret_cast<const __half2 *>(&a), *pb = reinterpret_cast<const __half2 *>(&b);
  __half2 *po = reinterpret_cast<__half2 *>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i) po[i] = __hadd2(pa[i], pb[i]);
  return out;
}

template <typename T>
__global__ void add2_vectorised(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ out, int64_t n) {
  using V = typename Vec<T>::type;
  constexpr int lanes = Vec<T>::kLanes;
  const int64_t vectors = n / lanes;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const V *va = reinterpret_cast<const V *>(a), *vb = reinterpret_cast<const V *>(b);
  V *vo = reinterpret_cast<V *>(out);
  for (int64_t i = first; i < vectors; i += stride) vo[i] = add_vec(va[i], vb[i]);
  for (int64_t i = vectors * lanes + first; i < n; i += stride) out[i] = a[i] + b[i];  // the tail
}

template <typename T>
__global__ void add2_scalar(const T *__restrict__ a, const T *__restrict__ b, T *__restrict__ out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = a[i] + b[i];
}

inline bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Launches on `stream`; a few waves of blocks per SM, the grid-stride loop covers the rest.
template <typename T>
cudaError_t launch(const T *a, const T *b, T *out, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  constexpr int threads = 256;
  const int64_t lanes = (aligned16(a) && aligned16(b) && aligned16(out)) ? Vec<T>::kLanes : 1;
  const int64_t needed = (n / lanes + threads - 1) / threads;
  const int blocks = static_cast<int>(needed < 4LL * sms ? (needed > 0 ? needed : 1) : 4LL * sms);
  if (lanes > 1) {
    add2_vectorised<T><<<blocks, threads, 0, stream>>>(a, b, out, n);
  } else {
    add2_scalar<T><<<blocks, threads, 0, stream>>>(a, b, out, n);
  }
  return cudaGetLastError();
}

}  // namespace add2
