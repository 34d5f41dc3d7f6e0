// DataCopy between GM and UB (and UB to UB).
//
// count * sizeof(T) must be a multiple of 32 B (the NPU silently rounds down otherwise); the UB address must be
// 32-B aligned (the NPU faults); GM needs no alignment (INVARIANTS.md, invariant 2).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "core.h"
#include "global_tensor.h"
#include "local_tensor.h"

namespace ascendc_emu {

namespace detail {

template <typename T>
void check_copy_length(CoreContext &core, const char *call, uint32_t count) {
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(T);
  if (bytes % kBlockBytes != 0)
    core.fail(call, std::to_string(count) + " elements = " + std::to_string(bytes) +
                        " B is not a multiple of 32 B (the NPU would copy only " +
                        std::to_string(bytes / kBlockBytes * kBlockBytes) + " B)");
}

}  // namespace detail

// GM -> UB
template <typename T>
void DataCopy(const LocalTensor<T> &dst, const GlobalTensor<T> &src, uint32_t count) {
  constexpr const char *call = "DataCopy(GM->UB)";
  CoreContext &core = current_core(call);
  detail::check_copy_length<T>(core, call, count);
  const T *from = src.elements(call, 0, count);
  T *to = dst.elements(call, "dst", 0, count, Access::kWrite);
  std::memcpy(static_cast<void *>(to), from, static_cast<size_t>(count) * sizeof(T));
}

// UB -> GM
template <typename T>
void DataCopy(const GlobalTensor<T> &dst, const LocalTensor<T> &src, uint32_t count) {
  constexpr const char *call = "DataCopy(UB->GM)";
  CoreContext &core = current_core(call);
  detail::check_copy_length<T>(core, call, count);
  const T *from = src.elements(call, "src", 0, count, Access::kRead);
  T *to = dst.elements(call, 0, count);
  std::memcpy(static_cast<void *>(to), from, static_cast<size_t>(count) * sizeof(T));
  core.record_gm_write(to, static_cast<size_t>(count) * sizeof(T), call);
}

// UB -> UB
template <typename T>
void DataCopy(const LocalTensor<T> &dst, const LocalTensor<T> &src, uint32_t count) {
  constexpr const char *call = "DataCopy(UB->UB)";
  CoreContext &core = current_core(call);
  detail::check_copy_length<T>(core, call, count);
  const T *from = src.elements(call, "src", 0, count, Access::kRead);
  T *to = dst.elements(call, "dst", 0, count, Access::kWrite);
  std::memmove(static_cast<void *>(to), from, static_cast<size_t>(count) * sizeof(T));
}

}  // namespace ascendc_emu
