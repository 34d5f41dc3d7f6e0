// Tiling of leaky_relu_custom (fp16). The length is cut into 32-B blocks of 16 elements, spread over the cores;
// each core's range is cut into tiles of tileLength elements, and the last tile may be shorter (a tail, still a
// whole number of blocks because INVARIANTS.md requires DataCopy lengths to be multiples of 32 B).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

namespace leaky_relu_custom_tiling {

constexpr int64_t kBlockElements = 16;    // 32 B of fp16
constexpr int64_t kMaxTileLength = 4096;  // elements; smaller tiles keep the copy/compute pipeline busy
constexpr int64_t kBuffersPerTile = 5;    // 2 in, 2 out, 1 scratch

struct Plan {
  uint32_t tileLength = 0;
  std::string unmet;  // empty when the kernel can run
};

inline Plan plan(int64_t total, int64_t blockDim, int64_t ubBytes) {
  Plan p;
  if (blockDim < 1 || blockDim > 65535) {
    p.unmet = "blockDim " + std::to_string(blockDim) + " outside [1, 65535]";
  } else if (total <= 0 || total % kBlockElements != 0) {
    p.unmet = std::to_string(total) + " elements is not a positive multiple of 16 (32 B of fp16)";
  } else if (total > UINT32_MAX) {
    p.unmet = "more than 2^32-1 elements";
  } else {
    const int64_t blocks = total / kBlockElements;
    const int64_t perCore = (blocks + blockDim - 1) / blockDim * kBlockElements;  // the largest share
    const int64_t byUb = ubBytes / (kBuffersPerTile * 2) / kBlockElements * kBlockElements;
    const int64_t tile = std::min({perCore, kMaxTileLength, byUb});
    if (tile < kBlockElements)
      p.unmet = "a tile of 16 elements does not fit in a " + std::to_string(ubBytes) + " B Unified Buffer";
    else
      p.tileLength = static_cast<uint32_t>(tile);
  }
  return p;
}

}  // namespace leaky_relu_custom_tiling
