// Runs a registered kernel on the emulator and reports what happened, for ctypes.
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "broken.h"

namespace {

int report(char *message, size_t capacity, const std::string &text, int status) {
  if (capacity > 0) {
    std::strncpy(message, text.c_str(), capacity - 1);
    message[capacity - 1] = '\0';
  }
  return status;
}

}  // namespace

// 0: the kernel ran without complaint; 1: AscendcEmulatorError (text in `message`); 2: another exception;
// 3: no such kernel. `block_dim` < 0 uses the kernel's own.
extern "C" __attribute__((visibility("default"))) int ascendc_broken_run(const char *name, const char *order,
                                                                         int64_t block_dim, char *message,
                                                                         size_t capacity) {
  auto it = broken::registry().find(name);
  if (it == broken::registry().end()) return report(message, capacity, "no kernel named " + std::string(name), 3);
  ascendc_emu::LaunchOptions options;
  const std::string o = order;
  options.order = o == "reversed"  ? ascendc_emu::CoreOrder::kReversed
                  : o == "threads" ? ascendc_emu::CoreOrder::kThreads
                                   : ascendc_emu::CoreOrder::kInOrder;
  std::vector<half> x(broken::kGmElements, half(1.0f));
  std::vector<half> y(broken::kGmElements, half::from_bits(0x7e00));
  try {
    ascendc_emu::launch(name, block_dim < 0 ? it->second.block_dim : block_dim, options, it->second.kernel,
                        reinterpret_cast<GM_ADDR>(x.data()), reinterpret_cast<GM_ADDR>(y.data()));
  } catch (const ascendc_emu::AscendcEmulatorError &e) {
    return report(message, capacity, e.what(), 1);
  } catch (const std::exception &e) {
    return report(message, capacity, e.what(), 2);
  }
  return report(message, capacity, "", 0);
}
