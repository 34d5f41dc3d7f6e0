// The seven arguments of a MindSpore aot launch function, kept together, and the bounds ms_ext holds them to.
#pragma once

#include <cstdint>
#include <string>

namespace ms_ext {
namespace detail {

struct RawArgs {
  int nparam;
  void **params;    // inputs, then outputs, then workspaces
  int *ndims;       // inputs and outputs only: indexing it at a workspace reads garbage
  int64_t **shapes; // shapes[i] is NULL for a 0-dim tensor
  const char **dtypes;
  void *stream;     // NULL on CPU, MindSpore's cudaStream_t on GPU
  void *extra;      // mindspore::AotExtra* (only touched through ms_ext/c_api.h)
};

// MindSpore passes no array lengths, so a count or rank a C caller garbles cannot be checked against the arrays it
// indexes. These bounds turn the absurd ones (negative, or near 2^31) into a named error before anything is read
// with them. c10 itself sets no rank limit (a 100-dimensional tensor works); 64 is far above any real tensor's. A
// launch of a whole ported network (AtenProgram) passes one parameter per weight: thousands, not tens of thousands.
constexpr int kMaxRank = 64;
constexpr int kMaxParams = 1 << 16;

// Why `nparam` cannot be a launch's parameter count ("" when it can).
inline std::string parameter_count_fault(int nparam) {
  if (nparam >= 0 && nparam <= kMaxParams) return "";
  return "MindSpore passed " + std::to_string(nparam) + " parameters; a launch takes 0 to " +
         std::to_string(kMaxParams);
}

// Why `nd` cannot be a tensor's rank ("" when it can).
inline std::string rank_fault(int nd) {
  if (nd >= 0 && nd <= kMaxRank) return "";
  return nd < 0 ? "a negative rank " + std::to_string(nd)
                : "rank " + std::to_string(nd) + ", above the " + std::to_string(kMaxRank) + " ms_ext supports";
}

}  // namespace detail
}  // namespace ms_ext
