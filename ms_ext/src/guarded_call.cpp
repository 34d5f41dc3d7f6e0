// ms_ext_guarded_call and ms_ext_guarded_infer_shape (c_api.h): call an entry point the way MindSpore does,
// catching what it throws.
//
// Harnesses (aot_ops.harness, tests, the fuzz, the GPU checks) call entry points from Python through ctypes, and a
// C++ exception unwinding into ctypes terminates the process. These shims are the C++ frames that catch it, like
// MindSpore's own launch and shape inference code do, and return the text through ms_ext_last_error.
#include <string>
#include <vector>

#include "c_boundary.h"
#include "ms_ext/c_api.h"

namespace {

int fail(const char *text) {
  ms_ext_set_last_error(text);
  return -1;
}

using InferOne = std::vector<int64_t> (*)(int *, int64_t **, void *);
using InferSeveral = std::vector<std::vector<int64_t>> (*)(int *, int64_t **, void *);

// The shapes as [count, rank_0, dims_0..., ...], the layout ms_ext_guarded_infer_shape hands C callers.
std::vector<int64_t> flatten(const std::vector<std::vector<int64_t>> &shapes) {
  std::vector<int64_t> flat{static_cast<int64_t>(shapes.size())};
  for (const std::vector<int64_t> &shape : shapes) {
    flat.push_back(static_cast<int64_t>(shape.size()));
    flat.insert(flat.end(), shape.begin(), shape.end());
  }
  return flat;
}

}  // namespace

extern "C" {

typedef int (*ms_ext_aot_function)(int, void **, int *, int64_t **, const char **, void *, void *);

int ms_ext_guarded_call(void *function, int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                        void *stream, void *extra) {
  if (function == nullptr) return fail("ms_ext_guarded_call: the function is NULL");
  return ms_ext_c::at_c_boundary(
      [&] {
        const int status = reinterpret_cast<ms_ext_aot_function>(function)(nparam, params, ndims, shapes, dtypes,
                                                                           stream, extra);
        if (status != 0) ms_ext_set_last_error(("returned " + std::to_string(status)).c_str());
        return status;
      },
      [](const char *text) { return fail(text); },
      "a C++ exception that does not derive from std::exception escaped the entry point");
}

int64_t ms_ext_guarded_infer_shape(void *function, int several, int *ndims, int64_t **shapes, void *extra, int64_t *out,
                                   int64_t capacity) {
  if (function == nullptr) return fail("ms_ext_guarded_infer_shape: the function is NULL");
  if (out == nullptr && capacity > 0) return fail("ms_ext_guarded_infer_shape: out is NULL");
  return ms_ext_c::at_c_boundary(
      [&]() -> int64_t {
        const std::vector<int64_t> flat =
            flatten(several ? reinterpret_cast<InferSeveral>(function)(ndims, shapes, extra)
                            : std::vector<std::vector<int64_t>>{reinterpret_cast<InferOne>(function)(ndims, shapes,
                                                                                                     extra)});
        for (size_t i = 0; i < flat.size() && static_cast<int64_t>(i) < capacity; ++i) out[i] = flat[i];
        return static_cast<int64_t>(flat.size());
      },
      [](const char *text) -> int64_t { return fail(text); },
      "a C++ exception that does not derive from std::exception escaped the shape inference");
}

}  // extern "C"
