// Tiling of softmax_custom (fp32, over the last dimension). Rows are spread over the cores; each core's rows are
// cut into tiles of tileRows rows, and the last tile may hold fewer (a tail). A row must be a whole number of
// 32-B blocks (cols % 8 == 0) so every row starts 32-B aligned in the UB and every copy is a multiple of 32 B.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

namespace softmax_custom_tiling {

constexpr int64_t kBlockElements = 8;  // 32 B of fp32
constexpr int64_t kMaxTileRows = 8;
constexpr int64_t kBuffersPerTile = 4;  // 2 in, 2 out

// UB bytes besides the tiles: the reductions' work buffer (one row) and the 32-B result buffer.
inline int64_t fixed_bytes(int64_t cols) { return (cols * 4 + 31) / 32 * 32 + 32; }

struct Plan {
  uint32_t tileRows = 0;
  std::string unmet;
};

inline Plan plan(int64_t rows, int64_t cols, int64_t blockDim, int64_t ubBytes) {
  Plan p;
  if (blockDim < 1 || blockDim > 65535) {
    p.unmet = "blockDim " + std::to_string(blockDim) + " outside [1, 65535]";
  } else if (rows <= 0 || cols <= 0) {
    p.unmet = "empty input";
  } else if (cols % kBlockElements != 0) {
    p.unmet = "a row of " + std::to_string(cols) + " elements is not a multiple of 8 (32 B of fp32)";
  } else if (rows > UINT32_MAX || cols > UINT32_MAX || rows * cols > UINT32_MAX) {
    p.unmet = "more than 2^32-1 elements";
  } else {
    const int64_t rowsPerCore = (rows + blockDim - 1) / blockDim;
    const int64_t byUb = (ubBytes - fixed_bytes(cols)) / (kBuffersPerTile * cols * 4);
    const int64_t tile = std::min({rowsPerCore, kMaxTileRows, byUb});
    if (tile < 1)
      p.unmet = "one row of " + std::to_string(cols) + " elements does not fit in a " + std::to_string(ubBytes) +
                " B Unified Buffer";
    else
      p.tileRows = static_cast<uint32_t>(tile);
  }
  return p;
}

}  // namespace softmax_custom_tiling
