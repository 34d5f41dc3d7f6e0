// The exception boundary between a kernel and MindSpore.
//
// MindSpore catches std::exception around a launch and shows its what(); anything else escaping the extern "C"
// function aborts the process, and a c10::Error's what() carries a full C++ backtrace. So every failure is caught
// here and re-thrown as a std::runtime_error "<Operator>: <cause>". The same text is recorded as the thread's last
// error (ms_ext_last_error) for the cases where MindSpore drops it (Init hooks, GPU launches).
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include <ms_ext/c_api.h>

namespace ms_ext {
namespace detail {

// The text of the exception being handled, without c10's C++ backtrace; never empty, so a report always has a cause.
// Call only inside a catch block.
inline std::string describe_current_exception() {
  std::string text;
  try {
    throw;
  } catch (const c10::Error &e) {
    text = e.what_without_backtrace();
  } catch (const std::exception &e) {
    text = e.what();
  } catch (...) {
    return "a C++ exception that does not derive from std::exception was thrown";
  }
  return text.empty() ? "an exception with an empty message was thrown" : text;
}

[[noreturn]] inline void raise(const char *op_name, const std::string &cause) {
  const std::string message = std::string(op_name) + ": " + cause;
  ms_ext_set_last_error(message.c_str());
  throw std::runtime_error(message);
}

// Runs `body` with every exception converted. Torch's grad mode is thread-local and MindSpore may launch on any of
// its threads, so it is set explicitly for each call rather than inherited (kernels that need autograd enable it).
// So is torch's intra-op thread count (OpenMP keeps it per thread): without at::init_num_threads a MindSpore
// thread runs torch's parallel loops on every core whatever torch.set_num_threads said, competing with
// MindSpore's own threads.
// `op_name` is read when a failure is reported, so a body may name the operator once it knows it (the generic
// ATen entry learns it from its attributes).
template <typename Body>
void guarded(const std::string &op_name, Body &&body) {
  ms_ext_clear_last_error();
  try {
    at::init_num_threads();
    at::NoGradGuard no_grad;
    body();
  } catch (...) {
    raise(op_name.c_str(), describe_current_exception());
  }
}

template <typename Body>
void guarded(const char *op_name, Body &&body) {
  guarded(std::string(op_name), std::forward<Body>(body));
}

// The same boundary for C callers (ctypes, a kernel's dtype rule), where no exception may escape: 0, or -1 with
// "<Operator>: <cause>" as the thread's last error.
template <typename Body>
int guarded_status(const char *op_name, Body &&body) noexcept {
  try {
    guarded(op_name, std::forward<Body>(body));
    return 0;
  } catch (...) {  // guarded recorded the text; only a failure to build it (out of memory) lands here unrecorded
    if (ms_ext_last_error()[0] == '\0') ms_ext_set_last_error(op_name);
    return -1;
  }
}

}  // namespace detail
}  // namespace ms_ext
