// NPU placement (-DMS_EXT_TARGET_NPU): MindSpore's device buffers viewed as tensors of torch's PrivateUse1 device
// (torch_npu's "npu"), with MindSpore's aclrtStream as the current stream for the whole call.
//
// On an Ascend NPU MindSpore passes its own aclrtStream as `stream`. As on CUDA, ATen calls must be ordered on that
// stream with no host synchronisation: the stream becomes the device's current stream through c10's StreamGuard,
// which reaches torch_npu's guard implementation through c10's registry (the one torch_npu registers for
// PrivateUse1), so ATen's NPU kernels launch on it. What only torch_npu and ACL can answer (the current device, the
// c10::Stream of an external aclrtStream, the last ACL error) is asked through npu_runtime.h; everything here is
// device-generic, and runs on any PrivateUse1 backend that registers a guard.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>

#include <stdexcept>
#include <string>

#include <ms_ext/detail/npu_runtime.h>
#include <ms_ext/detail/raw_args.h>

namespace ms_ext {
namespace detail {

struct OnNpu {
  class Scope {
   public:
    explicit Scope(const RawArgs &raw)
        : device_(c10::DeviceType::PrivateUse1, npu_runtime::current_device()),
          guard_(npu_runtime::stream_from_external(raw.stream, device_.index())) {
      npu_runtime::clear_last_error();  // an earlier, unrelated error must not be reported as this kernel's
    }
    at::Device device() const { return device_; }

    // Launch errors surface here with ACL's text; errors of a kernel's execution surface asynchronously, at
    // MindSpore's next synchronisation (as on CUDA).
    void finish() {
      const std::string error = npu_runtime::take_last_error();
      if (!error.empty()) throw std::runtime_error("NPU error: " + error);
    }

   private:
    at::Device device_;
    c10::StreamGuard guard_;  // restores the previous current stream when the call ends, however it ends
  };
};

}  // namespace detail
}  // namespace ms_ext
