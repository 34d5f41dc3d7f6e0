// GlobalTensor<T>: a window of GM set by SetGlobalBuffer; an access outside the window is a bug (INVARIANTS.md,
// invariant 2). Sub-tensors (operator[]) keep the original window, so an offset past the end is caught
// when the data is touched, not when the view is made.
#pragma once

#include <cstdint>
#include <string>

#include "core.h"

namespace ascendc_emu {

template <typename T>
class GlobalTensor {
 public:
  void SetGlobalBuffer(T *buffer, uint64_t bufferSize) {
    if (buffer == nullptr) current_core("SetGlobalBuffer").fail("SetGlobalBuffer", "buffer is NULL");
    window_ = buffer;
    window_size_ = bufferSize;
    offset_ = 0;
  }

  GlobalTensor operator[](uint64_t offset) const {
    GlobalTensor view = *this;
    view.offset_ += offset;
    return view;
  }

  uint64_t GetSize() const { return window_size_ > offset_ ? window_size_ - offset_ : 0; }
  T *GetPhyAddr() const { return window_ + offset_; }

  T GetValue(uint64_t index) const { return *elements("GlobalTensor::GetValue", index, 1); }
  void SetValue(uint64_t index, T value) const {
    T *p = elements("GlobalTensor::SetValue", index, 1);
    *p = value;
    current_core("GlobalTensor::SetValue").record_gm_write(p, sizeof(T), "GlobalTensor::SetValue");
  }

  // Emulator side: the address of elements [index, index + count) of this view, after checking the window.
  T *elements(const char *call, uint64_t index, uint64_t count) const {
    CoreContext &core = current_core(call);
    if (window_ == nullptr) core.fail(call, "GlobalTensor used before SetGlobalBuffer");
    const uint64_t begin = offset_ + index;
    if (begin + count > window_size_) {
      core.fail(call, "GM access of elements [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                          ") is outside the SetGlobalBuffer window of " + std::to_string(window_size_) +
                          " elements");
    }
    return window_ + begin;
  }

 private:
  T *window_ = nullptr;
  uint64_t window_size_ = 0;
  uint64_t offset_ = 0;
};

}  // namespace ascendc_emu
