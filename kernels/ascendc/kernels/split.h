// Splitting `units` work units over blockDim cores as evenly as possible: the first `units % blockDim` cores take
// one unit more. Shared by kernels and hosts so both agree on who owns what (and no two cores write the same
// GM bytes).
#pragma once

#include <cstdint>

// Kernels call core_share on the AI core, hosts on the CPU: with CANN's compiler a device function needs
// __aicore__ (kernel_operator.h defines it); host code that did not include kernel_operator.h has no such macro.
#ifdef __aicore__
#define ASCENDC_TILING_FUNCTION __aicore__ inline
#else
#define ASCENDC_TILING_FUNCTION inline
#endif

namespace ascendc_tiling {

struct CoreShare {
  int64_t first;  // first unit of this core
  int64_t count;  // units of this core (may be 0 when blockDim > units)
};

ASCENDC_TILING_FUNCTION CoreShare core_share(int64_t units, int64_t blockDim, int64_t core) {
  const int64_t base = units / blockDim;
  const int64_t extra = units % blockDim;
  return {core * base + (core < extra ? core : extra), base + (core < extra ? 1 : 0)};
}

}  // namespace ascendc_tiling
