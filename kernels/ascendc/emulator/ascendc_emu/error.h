// The one exception type the emulator throws, so callers (aot entries, tests) can report it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ascendc_emu {

// "kernel <name>, core <i>, <Call>: <what>". Launch-level failures (bad blockDim, a race between cores found
// after all cores ran) have no single core: core is -1 and the text says "launch" or names both cores.
class AscendcEmulatorError : public std::runtime_error {
 public:
  AscendcEmulatorError(const std::string &kernel, int64_t core, const std::string &call, const std::string &what)
      : std::runtime_error(format(kernel, core, call, what)), kernel_(kernel), core_(core), call_(call) {}

  const std::string &kernel() const { return kernel_; }
  int64_t core() const { return core_; }
  const std::string &call() const { return call_; }

 private:
  static std::string format(const std::string &kernel, int64_t core, const std::string &call,
                            const std::string &what) {
    std::string where = "kernel " + kernel;
    if (core >= 0) where += ", core " + std::to_string(core);
    return where + ", " + call + ": " + what;
  }

  std::string kernel_;
  int64_t core_;
  std::string call_;
};

}  // namespace ascendc_emu
