// Splitting `units` work units over blockDim cores as evenly as possible: the first `units % blockDim` cores take
// one unit more. Shared by kernels and hosts so both agree on who owns what (and no two cores write the same
// GM bytes).
#pragma once

#include <cstdint>

namespace ascendc_tiling {

struct CoreShare {
  int64_t first;  // first unit of this core
  int64_t count;  // units of this core (may be 0 when blockDim > units)
};

inline CoreShare core_share(int64_t units, int64_t blockDim, int64_t core) {
  const int64_t base = units / blockDim;
  const int64_t extra = units % blockDim;
  return {core * base + (core < extra ? core : extra), base + (core < extra ? 1 : 0)};
}

}  // namespace ascendc_tiling
