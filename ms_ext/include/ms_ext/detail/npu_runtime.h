// What the NPU placement (npu_placement.h) asks of the NPU runtime. ms_ext/src/npu_runtime.cpp answers through
// torch_npu and ACL (the builder compiles it into every library with NPU placement); a library may define these
// four itself instead (the tests' CPU-backed PrivateUse1 device does, so every line of the placement runs without
// an NPU: aot_ops' LibrarySpec.npu_runtime_in_sources).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <string>

namespace ms_ext {
namespace detail {
namespace npu_runtime {

// The device MindSpore's launching thread works on (MindSpore sets it for its threads).
c10::DeviceIndex current_device();

// The c10::Stream of MindSpore's aclrtStream on `device`, as the registered PrivateUse1 guard knows it.
c10::Stream stream_from_external(void *stream, c10::DeviceIndex device);

// The launching thread's last runtime error: cleared before the call, taken (and cleared) after it; "" if none.
void clear_last_error();
std::string take_last_error();

}  // namespace npu_runtime
}  // namespace detail
}  // namespace ms_ext
