// Deliberately broken Ascend C kernels, one per invariant of kernels/ascendc/emulator/INVARIANTS.md, each registered under a name so
// tests/test_ascendc_invariants.py can run it and check the emulator's message. Every kernel gets two GM buffers
// of kGmElements fp16 elements (`x` filled with 1.0, `y` with NaN).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kernel_operator.h"

namespace broken {

constexpr uint32_t kGmElements = 4096;

using KernelFn = void (*)(GM_ADDR x, GM_ADDR y);

struct Case {
  KernelFn kernel;
  int64_t block_dim;
};

inline std::map<std::string, Case> &registry() {
  static std::map<std::string, Case> cases;
  return cases;
}

struct Register {
  Register(const char *name, KernelFn fn, int64_t block_dim) { registry()[name] = {fn, block_dim}; }
};

}  // namespace broken

// BROKEN_KERNEL(name, blockDim) { body using x, y }
#define BROKEN_KERNEL(NAME, BLOCK_DIM)                                                    \
  static void NAME(GM_ADDR x, GM_ADDR y);                                                 \
  static const broken::Register register_##NAME(#NAME, NAME, BLOCK_DIM);                  \
  static void NAME([[maybe_unused]] GM_ADDR x, [[maybe_unused]] GM_ADDR y)
