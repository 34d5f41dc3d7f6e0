// Vector instructions on UB operands, in the count form (`Add(dst, src0, src1, count)`).
//
// Operands are 32-B aligned and hold >= count elements; dst and a source overlap fully or not at all
// (INVARIANTS.md, "Semantics reproduced"). half arithmetic is done in float and rounded once to nearest-even (bit-exact with numpy's float16).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core.h"
#include "half.h"
#include "local_tensor.h"

namespace ascendc_emu {

enum pipe_t { PIPE_S, PIPE_V, PIPE_M, PIPE_MTE1, PIPE_MTE2, PIPE_MTE3, PIPE_ALL };

// Orders instructions between pipes on the NPU. The emulator runs each call to completion, so there is nothing
// to wait for.
template <pipe_t Pipe>
inline void PipeBarrier() {}

namespace detail {

template <typename T>
void check_overlap(CoreContext &core, const char *call, const T *dst, const T *src, uint32_t count,
                   const char *src_name) {
  const T *dst_end = dst + count;
  const T *src_end = src + count;
  if (dst != src && dst < src_end && src < dst_end)
    core.fail(call, std::string("dst and ") + src_name + " overlap partially (they must coincide or be disjoint)");
}

template <typename T, typename F>
void unary(const char *call, const LocalTensor<T> &dst, const LocalTensor<T> &src, uint32_t count, F f) {
  CoreContext &core = current_core(call);
  const T *a = src.elements(call, "src", 0, count, Access::kRead);
  T *d = dst.elements(call, "dst", 0, count, Access::kWrite);
  check_overlap(core, call, d, a, count, "src");
  for (uint32_t i = 0; i < count; ++i) d[i] = T(f(static_cast<ComputeType<T>>(a[i])));
}

template <typename T, typename F>
void binary(const char *call, const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1,
            uint32_t count, F f) {
  CoreContext &core = current_core(call);
  const T *a = src0.elements(call, "src0", 0, count, Access::kRead);
  const T *b = src1.elements(call, "src1", 0, count, Access::kRead);
  T *d = dst.elements(call, "dst", 0, count, Access::kWrite);
  check_overlap(core, call, d, a, count, "src0");
  check_overlap(core, call, d, b, count, "src1");
  for (uint32_t i = 0; i < count; ++i)
    d[i] = T(f(static_cast<ComputeType<T>>(a[i]), static_cast<ComputeType<T>>(b[i])));
}

// The work tensor of a reduction: on the NPU it holds per-repeat partial results; here it only has to be a
// valid, aligned operand of at least one 32-B block.
template <typename T>
void use_work_tensor(const char *call, const LocalTensor<T> &work) {
  constexpr uint32_t per_block = kBlockBytes / sizeof(T);
  work.elements(call, "workLocal", 0, per_block, Access::kWrite);
}

}  // namespace detail

// ---- elementwise, two sources ----------------------------------------------------------------------------------
template <typename T>
void Add(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, int32_t count) {
  detail::binary("Add", dst, src0, src1, count, [](auto a, auto b) { return a + b; });
}
template <typename T>
void Sub(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, int32_t count) {
  detail::binary("Sub", dst, src0, src1, count, [](auto a, auto b) { return a - b; });
}
template <typename T>
void Mul(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, int32_t count) {
  detail::binary("Mul", dst, src0, src1, count, [](auto a, auto b) { return a * b; });
}
template <typename T>
void Div(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, int32_t count) {
  detail::binary("Div", dst, src0, src1, count, [](auto a, auto b) { return a / b; });
}
template <typename T>
void Max(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, int32_t count) {
  detail::binary("Max", dst, src0, src1, count, [](auto a, auto b) { return a > b ? a : b; });
}
template <typename T>
void Min(const LocalTensor<T> &dst, const LocalTensor<T> &src0, const LocalTensor<T> &src1, int32_t count) {
  detail::binary("Min", dst, src0, src1, count, [](auto a, auto b) { return a < b ? a : b; });
}

// ---- elementwise with a scalar (the scalar has the tensor's type, as on the NPU) ---------------------------------
template <typename T>
void Adds(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalar, int32_t count) {
  const ComputeType<T> s = static_cast<ComputeType<T>>(scalar);
  detail::unary("Adds", dst, src, count, [s](auto a) { return a + s; });
}
template <typename T>
void Muls(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalar, int32_t count) {
  const ComputeType<T> s = static_cast<ComputeType<T>>(scalar);
  detail::unary("Muls", dst, src, count, [s](auto a) { return a * s; });
}
template <typename T>
void Maxs(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalar, int32_t count) {
  const ComputeType<T> s = static_cast<ComputeType<T>>(scalar);
  detail::unary("Maxs", dst, src, count, [s](auto a) { return a > s ? a : s; });
}
template <typename T>
void Mins(const LocalTensor<T> &dst, const LocalTensor<T> &src, const T &scalar, int32_t count) {
  const ComputeType<T> s = static_cast<ComputeType<T>>(scalar);
  detail::unary("Mins", dst, src, count, [s](auto a) { return a < s ? a : s; });
}

// ---- elementwise, one source -------------------------------------------------------------------------------------
template <typename T>
void Exp(const LocalTensor<T> &dst, const LocalTensor<T> &src, int32_t count) {
  detail::unary("Exp", dst, src, count, [](auto a) { return std::exp(a); });
}
template <typename T>
void Ln(const LocalTensor<T> &dst, const LocalTensor<T> &src, int32_t count) {
  detail::unary("Ln", dst, src, count, [](auto a) { return std::log(a); });
}
template <typename T>
void Sqrt(const LocalTensor<T> &dst, const LocalTensor<T> &src, int32_t count) {
  detail::unary("Sqrt", dst, src, count, [](auto a) { return std::sqrt(a); });
}
template <typename T>
void Abs(const LocalTensor<T> &dst, const LocalTensor<T> &src, int32_t count) {
  detail::unary("Abs", dst, src, count, [](auto a) { return a < 0 ? -a : a; });
}
template <typename T>
void Relu(const LocalTensor<T> &dst, const LocalTensor<T> &src, int32_t count) {
  detail::unary("Relu", dst, src, count, [](auto a) { return a > 0 ? a : decltype(a)(0); });
}

// dst[0:count] = scalar
template <typename T>
void Duplicate(const LocalTensor<T> &dst, const T &scalar, int32_t count) {
  T *d = dst.elements("Duplicate", "dst", 0, count, Access::kWrite);
  std::fill(d, d + count, scalar);
}

// ---- reductions: the result goes to dst[0] ------------------------------------------------------------------------
// Sums in float (half inputs) with pairwise partial sums, like the NPU's repeat-wise tree; compare with a
// tolerance, not bit for bit.
template <typename T>
void ReduceSum(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &workLocal, int32_t count) {
  constexpr const char *call = "ReduceSum";
  if (count <= 0) current_core(call).fail(call, "count must be positive, got " + std::to_string(count));
  const T *a = src.elements(call, "src", 0, count, Access::kRead);
  detail::use_work_tensor(call, workLocal);
  std::vector<ComputeType<T>> partial(a, a + count);
  for (size_t n = partial.size(); n > 1;) {
    const size_t upper = (n + 1) / 2;  // fold the upper half onto the lower; an odd middle element stays
    for (size_t i = 0; i < n / 2; ++i) partial[i] = partial[i] + partial[i + upper];
    n = upper;
  }
  *dst.elements(call, "dst", 0, 1, Access::kWrite) = T(partial[0]);
}

// The maximum goes to dst[0]; with calIndex its index follows in dst[1], stored as raw uint32 bits as on the NPU.
template <typename T>
void ReduceMax(const LocalTensor<T> &dst, const LocalTensor<T> &src, const LocalTensor<T> &workLocal, int32_t count,
               bool calIndex = false) {
  constexpr const char *call = "ReduceMax";
  if (count <= 0) current_core(call).fail(call, "count must be positive, got " + std::to_string(count));
  const T *a = src.elements(call, "src", 0, count, Access::kRead);
  detail::use_work_tensor(call, workLocal);
  int32_t best = 0;
  for (int32_t i = 1; i < count; ++i)
    if (static_cast<ComputeType<T>>(a[i]) > static_cast<ComputeType<T>>(a[best])) best = i;
  T *d = dst.elements(call, "dst", 0, calIndex ? 2 : 1, Access::kWrite);
  d[0] = a[best];
  if (calIndex) {
    uint32_t index = static_cast<uint32_t>(best);
    std::memcpy(&d[1], &index, std::min(sizeof(T), sizeof(index)));
  }
}

}  // namespace ascendc_emu
