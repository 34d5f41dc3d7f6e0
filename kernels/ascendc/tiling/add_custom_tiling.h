// What add_custom silently requires, computed once for every host (the emulator launch and the NPU launch).
//
// With blockLength = total/blockDim, 8 tiles, 2 buffers and fp16, total must be a multiple of 256 * blockDim and,
// on 910B, at most 262144 * blockDim (kernels/ascendc/emulator/INVARIANTS.md, "What the bundled kernels' tiling
// requires"). The UB bound is derived from the UB size, so a 256 KB part allows more.
#pragma once

#include <cstdint>
#include <string>

namespace add_custom_tiling {

// The kernel (kernels/add_custom.cpp) uses the same numbers as BUFFER_NUM and TILE_NUM.
constexpr int32_t kBufferNum = 2;
constexpr int32_t kTileNum = 8;
constexpr int64_t kQueues = 3;           // x, y, z
constexpr int64_t kElementBytes = 2;     // fp16
constexpr int64_t kBlockElements = 32 / kElementBytes;

// Empty when add_custom can run on `total` elements with `blockDim` cores and `ubBytes` of UB per core;
// otherwise the reason it cannot.
inline std::string unmet_precondition(int64_t total, int64_t blockDim, int64_t ubBytes) {
  if (blockDim < 1 || blockDim > 65535) return "blockDim " + std::to_string(blockDim) + " outside [1, 65535]";
  const int64_t unit = kBlockElements * kTileNum * kBufferNum * blockDim;  // 256 * blockDim
  if (total <= 0 || total % unit != 0)
    return std::to_string(total) + " elements is not a positive multiple of " + std::to_string(unit) +
           " (256 * blockDim)";
  const int64_t tileBytes = total / blockDim / kTileNum / kBufferNum * kElementBytes;
  if (kQueues * kBufferNum * tileBytes > ubBytes)
    return "tiles of " + std::to_string(tileBytes) + " B x 6 buffers exceed the " + std::to_string(ubBytes) +
           " B Unified Buffer";
  if (total > UINT32_MAX) return "more than 2^32-1 elements";
  return {};
}

}  // namespace add_custom_tiling
