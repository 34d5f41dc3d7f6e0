// ms_ext_guarded_call: call an aot launch function the way MindSpore's CPU kernel does, catching what it throws.
//
// Harnesses (aot_ops.harness, tests, the GPU checks) call entry points from Python through ctypes, and a C++
// exception unwinding into ctypes terminates the process. This shim is the C++ frame that catches it, like
// MindSpore's own launch code does, and returns the text through ms_ext_last_error.
#include <string>

#include "c_boundary.h"
#include "ms_ext/c_api.h"

extern "C" {

typedef int (*ms_ext_aot_function)(int, void **, int *, int64_t **, const char **, void *, void *);

MS_EXT_EXPORT int ms_ext_guarded_call(void *function, int nparam, void **params, int *ndims, int64_t **shapes,
                                      const char **dtypes, void *stream, void *extra) {
  return ms_ext_c::at_c_boundary(
      [&] {
        const int status = reinterpret_cast<ms_ext_aot_function>(function)(nparam, params, ndims, shapes, dtypes,
                                                                           stream, extra);
        if (status != 0) ms_ext_set_last_error(("returned " + std::to_string(status)).c_str());
        return status;
      },
      [](const char *text) {
        ms_ext_set_last_error(text);
        return -1;
      },
      "a C++ exception that does not derive from std::exception escaped the entry point");
}

}  // extern "C"
