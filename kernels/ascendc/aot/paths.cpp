#include "paths.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace {

std::mutex mutex;
std::map<std::pair<std::string, std::string>, int64_t> &counts() {
  static auto *table = new std::map<std::pair<std::string, std::string>, int64_t>();  // never destroyed: safe at exit
  return *table;
}

bool logging() {
  static const bool on = [] {
    const char *v = std::getenv("AOT_OPS_ASCENDC_LOG");
    return v != nullptr && *v != '\0' && std::string(v) != "0";
  }();
  return on;
}

}  // namespace

extern "C" int64_t ascendc_path_count(const char *op, const char *path) {
  if (op == nullptr || path == nullptr) return 0;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = counts().find({op, path});
  return it == counts().end() ? 0 : it->second;
}

extern "C" void ascendc_path_count_reset(void) {
  std::lock_guard<std::mutex> lock(mutex);
  counts().clear();
}

extern "C" void ascendc_note_path(const char *op, const char *path, const char *reason) {
  if (op != nullptr && path != nullptr) ascendc_aot::note_path(op, path, reason != nullptr ? reason : "");
}

namespace ascendc_aot {

void note_path(const char *op, const char *path, const char *reason) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    ++counts()[{op, path}];
  }
  if (logging()) std::fprintf(stderr, "aot_ops.ascendc: %s -> %s%s%s\n", op, path, *reason ? ": " : "", reason);
}

}  // namespace ascendc_aot
