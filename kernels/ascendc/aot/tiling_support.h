// The helpers a tiling function compiled from Python (aot_ops/ascendc/_tiling.py) calls, with no dependency: the
// emulator build includes it through user_kernel_support.h, and the NPU project of a library made by
// aot_ops.ascendc.load carries a copy beside its host_launch.cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace ascendc_tiling_support {

using Shapes = std::vector<std::vector<int64_t>>;

struct DivisionByZero {};

inline int64_t dim(const Shapes &s, int input, int k) {
  const int64_t rank = static_cast<int64_t>(s[input].size());
  return s[input][static_cast<size_t>(k >= 0 ? k : rank + k)];
}

inline int64_t numel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Python's // and % (floor division), which the tiling function was written with.
inline int64_t floordiv(int64_t a, int64_t b) {
  if (b == 0) throw DivisionByZero{};
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

inline int64_t mod(int64_t a, int64_t b) {
  if (b == 0) throw DivisionByZero{};
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

inline int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t max(int64_t a, int64_t b) { return a < b ? b : a; }

}  // namespace ascendc_tiling_support
