// Host-side launches of the Ascend C kernels on the CPU emulator: what `<<<blockDim, nullptr, stream>>>` (or
// ACLRT_LAUNCH_KERNEL) is on the NPU. Pointers are GM addresses (the caller's buffers). Each throws
// ascendc_emu::AscendcEmulatorError when the kernel breaks an invariant; callers check the tiling preconditions
// (kernels/ascendc/tiling/) first.
#pragma once

#include <cstdint>

#include "ascendc_emu/launch.h"

namespace ascendc_host {

void add_custom(int64_t blockDim, const ascendc_emu::LaunchOptions &options, const void *x, const void *y, void *z,
                uint32_t totalLength);

void leaky_relu_custom(int64_t blockDim, const ascendc_emu::LaunchOptions &options, const void *x, void *y,
                       uint32_t totalLength, uint32_t tileLength, float negativeSlope);

void softmax_custom(int64_t blockDim, const ascendc_emu::LaunchOptions &options, const void *x, void *y,
                    uint32_t rows, uint32_t cols, uint32_t tileRows);

}  // namespace ascendc_host
