// Last-error storage behind ms_ext_last_error(). Kept ABI-neutral (only C strings cross the interface), so it
// links into torch-facing libraries and plain C/C++ ones alike.
#include <mutex>
#include <string>

#include "ms_ext/c_api.h"

namespace {

thread_local std::string g_thread_error;

// The process-wide copy exists because MindSpore may launch on a worker thread while Python asks on the main
// thread. Readers get their own thread-local copy, so another thread's failure cannot free the text under them.
std::mutex g_any_mutex;
std::string g_any_error;

}  // namespace

extern "C" {

const char *ms_ext_last_error(void) { return g_thread_error.c_str(); }

const char *ms_ext_last_error_any_thread(void) {
  thread_local std::string copy;
  std::lock_guard<std::mutex> lock(g_any_mutex);
  copy = g_any_error;
  return copy.c_str();
}

void ms_ext_clear_last_error(void) { g_thread_error.clear(); }

void ms_ext_set_last_error(const char *message) {
  const char *text = message == nullptr ? "" : message;
  g_thread_error = text;
  std::lock_guard<std::mutex> lock(g_any_mutex);
  g_any_error = text;
}

}  // extern "C"
