// Which path an operator took (the Ascend C kernel on the emulator, or the ATen fallback), counted per process so
// callers and tests can see it: `ascendc_path_count("add_custom", "kernel")`.
#pragma once

#include <cstdint>

#include <ms_ext/c_api.h>

extern "C" {
// Number of calls of kernel `op` that took `path` ("kernel" or "aten") since the last reset.
MS_EXT_EXPORT int64_t ascendc_path_count(const char *op, const char *path);
MS_EXT_EXPORT void ascendc_path_count_reset(void);
// Counts one call of `op` taking `path` (and logs it with AOT_OPS_ASCENDC_LOG=1): how the libraries built by
// aot_ops.ascendc.load share these counts.
MS_EXT_EXPORT void ascendc_note_path(const char *op, const char *path, const char *reason);
}

namespace ascendc_aot {

// Counts the path; with AOT_OPS_ASCENDC_LOG=1 in the environment also prints it, with the reason for a fallback.
void note_path(const char *op, const char *path, const char *reason = "");

}  // namespace ascendc_aot
