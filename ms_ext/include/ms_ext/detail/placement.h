// Where a kernel's tensors live. One kernel source builds for CPU, for CUDA when compiled with -DMS_EXT_TARGET_CUDA
// (ms_ext/detail/cuda_placement.h), or for an Ascend NPU through torch_npu with -DMS_EXT_TARGET_NPU
// (ms_ext/detail/npu_placement.h): the placement decides the device of the tensor views and what surrounds the
// call (on a device, MindSpore's stream made torch's current stream).
#pragma once

#include <c10/core/Device.h>

#include <ms_ext/detail/raw_args.h>

namespace ms_ext {
namespace detail {

struct OnCpu {
  class Scope {
   public:
    explicit Scope(const RawArgs &) {}
    at::Device device() const { return at::kCPU; }
    void finish() {}
  };
};

}  // namespace detail
}  // namespace ms_ext

#if defined(MS_EXT_TARGET_CUDA) && defined(MS_EXT_TARGET_NPU)
#error "ms_ext: MS_EXT_TARGET_CUDA and MS_EXT_TARGET_NPU are exclusive: build one library per device"
#elif defined(MS_EXT_TARGET_CUDA)
#include <ms_ext/detail/cuda_placement.h>
namespace ms_ext::detail {
using DefaultPlacement = OnCuda;
}
#elif defined(MS_EXT_TARGET_NPU)
#include <ms_ext/detail/npu_placement.h>
namespace ms_ext::detail {
using DefaultPlacement = OnNpu;
}
#else
namespace ms_ext::detail {
using DefaultPlacement = OnCpu;
}
#endif
