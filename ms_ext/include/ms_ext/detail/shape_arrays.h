// The input shapes MindSpore hands a C++ shape inference (and an Init hook), read without trusting their length.
//
// MindSpore passes `int *ndims, int64_t **shapes` built from the inputs the primitive was actually called with, and
// no count. A primitive called with fewer inputs than the kernel declares (a GRAPH_MODE Cell passing one argument
// to a two-input operator) gives arrays that end early: reading past them reads the heap, and following a garbage
// pointer kills the process. So every entry is checked before it is read through: the memory must be mapped
// (ms_ext_mapped), the rank and the dimensions plausible. What passes is then checked exactly at launch, where
// MindSpore does pass the parameter count.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <ms_ext/c_api.h>
#include <ms_ext/detail/raw_args.h>
#include <ms_ext/infer.h>

namespace ms_ext {
namespace detail {

constexpr int64_t kMaxDim = int64_t{1} << 40;      // no real dimension comes near; a heap address is above
constexpr int64_t kMaxElements = int64_t{1} << 48;

inline std::vector<Shape> read_input_shapes(int count, const int *ndims, int64_t *const *shapes) {
  const auto fail = [count](int i, const std::string &what) {
    throw std::invalid_argument("input " + std::to_string(i) + " " + what + "; the kernel takes " +
                                std::to_string(count) + " input(s): was the operator given fewer?");
  };
  std::vector<Shape> out;
  for (int i = 0; i < count; ++i) {
    if (ndims == nullptr || !ms_ext_mapped(ndims + i, sizeof(int))) fail(i, "has no rank");
    const int nd = ndims[i];
    if (!rank_fault(nd).empty()) fail(i, "has " + rank_fault(nd));
    if (nd == 0) {  // 0-dim: MindSpore passes no shape (NULL)
      out.emplace_back();
      continue;
    }
    if (shapes == nullptr || !ms_ext_mapped(shapes + i, sizeof(int64_t *))) fail(i, "has no shape");
    const int64_t *dims = shapes[i];
    if (dims == nullptr || reinterpret_cast<uintptr_t>(dims) % alignof(int64_t) != 0 ||
        !ms_ext_mapped(dims, sizeof(int64_t) * static_cast<size_t>(nd)))
      fail(i, "has rank " + std::to_string(nd) + " but no readable shape");
    Shape shape(dims, dims + nd);
    int64_t elements = 1;
    for (int64_t d : shape) {
      const bool unknown_rank = nd == 1 && d == kUnknownRank;
      if ((d < kUnknownDim && !unknown_rank) || d > kMaxDim)
        fail(i, "has an impossible dimension " + std::to_string(d));
      if (d > 0 && elements > kMaxElements / d) fail(i, "has an impossible number of elements");
      if (d > 0) elements *= d;
    }
    out.push_back(std::move(shape));
  }
  return out;
}

}  // namespace detail
}  // namespace ms_ext
