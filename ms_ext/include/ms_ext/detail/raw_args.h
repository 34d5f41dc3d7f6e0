// The seven arguments of a MindSpore aot launch function, kept together.
#pragma once

#include <cstdint>

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

}  // namespace detail
}  // namespace ms_ext
