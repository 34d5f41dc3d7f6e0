// The exception boundary of ms_ext's own C functions (ms_ext/c_api.h) in the ABI-neutral files.
//
// These files see neither torch nor c10 (they link into torch-facing libraries and plain C/C++ ones alike, and one
// of them is built with the old C++ ABI to read MindSpore's AotExtra), so they cannot use detail/boundary.h. No
// exception may leave a C function: each catches here and turns the failure into its C result. What a site does
// with the text (record it as the last error, free a half-filled value, shorten MindSpore's multi-line report)
// stays with the site, in `on_failure`.
#pragma once

#include <exception>

namespace ms_ext_c {

// Returns `body()`, or `on_failure(text)` when it throws: the exception's what(), or `unknown` for an exception
// not derived from std::exception.
template <typename Body, typename OnFailure>
auto at_c_boundary(Body &&body, OnFailure &&on_failure,
                   const char *unknown = "a C++ exception that does not derive from std::exception was thrown")
    noexcept -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception &e) {
    return on_failure(e.what());
  } catch (...) {
    return on_failure(unknown);
  }
}

}  // namespace ms_ext_c
