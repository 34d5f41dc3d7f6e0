// How the Ascend C libraries run the emulator: core order and UB size, one setting per process, read by the launches
// generated from kernel declarations (user_kernel_support.h), the bundled library's and those of aot_ops.ascendc.load.
//
// A process-wide setting rather than an operator attribute because the same kernels are also reached from
// PyTorch, which passes no MindSpore attributes; tests switch it to run every kernel in every core order.
#pragma once

#include <cstdint>

#include <ms_ext/c_api.h>

#include "ascendc_emu/launch.h"

extern "C" {
// order: "in_order", "reversed" or "threads"; ub_bytes > 0 (192 KB = 910B, 256 KB = 910A). 0 on success, -1 with
// the reason in ms_ext_last_error().
MS_EXT_EXPORT int ascendc_emulator_configure(const char *order, int64_t ub_bytes);
// The current order's name, and the UB size.
MS_EXT_EXPORT const char *ascendc_emulator_order(void);
MS_EXT_EXPORT int64_t ascendc_emulator_ub_bytes(void);
}
