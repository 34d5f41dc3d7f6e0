// CUDA placement: MindSpore's device buffers viewed as CUDA tensors, with MindSpore's stream as torch's current
// stream for the whole call.
//
// On a GPU MindSpore passes its own cudaStream_t (created non-blocking) as `stream`. Running ATen on torch's default
// stream instead would race with MindSpore's next kernel, and synchronising would stall the device; wrapping the
// stream with c10::cuda::getStreamFromExternal and a CUDAStreamGuard orders every ATen launch of the call on
// MindSpore's stream, with no host synchronisation.
#pragma once

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include <ms_ext/detail/raw_args.h>

namespace ms_ext {
namespace detail {

struct OnCuda {
  class Scope {
   public:
    explicit Scope(const RawArgs &raw)
        : device_(find_device(raw)),
          guard_(c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(raw.stream), device_.index())) {
      (void)cudaGetLastError();  // an earlier, unrelated error must not be reported as this kernel's
    }
    at::Device device() const { return device_; }

    // Launch errors (bad configuration, missing kernel image) surface here with CUDA's text; errors of the kernel's
    // execution surface asynchronously, at MindSpore's next synchronisation.
    void finish() {
      const cudaError_t error = cudaGetLastError();
      if (error != cudaSuccess)
        throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(error));
    }

   private:
    // The device of MindSpore's buffers (from the first one CUDA knows), else the thread's current device.
    static at::Device find_device(const RawArgs &raw) {
      for (int i = 0; i < raw.nparam; ++i) {
        cudaPointerAttributes attributes{};
        if (raw.params[i] != nullptr && cudaPointerGetAttributes(&attributes, raw.params[i]) == cudaSuccess &&
            attributes.type == cudaMemoryTypeDevice)
          return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(attributes.device));
        (void)cudaGetLastError();
      }
      int current = 0;
      if (cudaGetDevice(&current) != cudaSuccess) throw std::runtime_error("no CUDA device is available");
      return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(current));
    }

    at::Device device_;
    c10::cuda::CUDAStreamGuard guard_;
  };
};

}  // namespace detail
}  // namespace ms_ext
