#include "emulator_settings.h"

#include <mutex>
#include <string>

namespace {

std::mutex mutex;
ascendc_emu::LaunchOptions options;

}  // namespace

extern "C" int ascendc_emulator_configure(const char *order, int64_t ub_bytes) {
  ascendc_emu::CoreOrder parsed;
  if (!ascendc_emu::parse_core_order(order, &parsed)) {
    ms_ext_set_last_error((std::string("unknown core order '") + (order ? order : "(null)") +
                           "' (expected in_order, reversed or threads)").c_str());
    return -1;
  }
  if (ub_bytes <= 0) {
    ms_ext_set_last_error(("UB size must be positive, got " + std::to_string(ub_bytes)).c_str());
    return -1;
  }
  std::lock_guard<std::mutex> lock(mutex);
  options.order = parsed;
  options.ub_bytes = static_cast<size_t>(ub_bytes);
  return 0;
}

extern "C" const char *ascendc_emulator_order(void) {
  std::lock_guard<std::mutex> lock(mutex);
  return ascendc_emu::core_order_name(options.order);
}

extern "C" int64_t ascendc_emulator_ub_bytes(void) {
  std::lock_guard<std::mutex> lock(mutex);
  return static_cast<int64_t>(options.ub_bytes);
}
