// The NPU runtime answers of ms_ext's NPU placement (ms_ext/detail/npu_runtime.h), through torch_npu and ACL.
// Compiled into a library built with NPU placement (-DMS_EXT_TARGET_NPU) unless its sources define them. Every
// line here needs an Ascend machine: elsewhere it is compiled and linked only.
#if defined(MS_EXT_TARGET_NPU)

#include <acl/acl.h>
#include <torch_npu/csrc/core/npu/NPUStream.h>

#include <stdexcept>
#include <string>

#include <ms_ext/detail/npu_runtime.h>

namespace ms_ext {
namespace detail {
namespace npu_runtime {

namespace {
std::string acl_text(aclError code) {
  const char *message = aclGetRecentErrMsg();
  return "ACL error " + std::to_string(code) + (message != nullptr && *message ? std::string(": ") + message : "");
}
}  // namespace

c10::DeviceIndex current_device() {
  int32_t device = -1;
  const aclError code = aclrtGetDevice(&device);  // the thread's context, which MindSpore set
  if (code != ACL_SUCCESS) throw std::runtime_error("no NPU device is set for this thread (" + acl_text(code) + ")");
  return static_cast<c10::DeviceIndex>(device);
}

c10::Stream stream_from_external(void *stream, c10::DeviceIndex device) {
  return c10_npu::getStreamFromExternal(static_cast<aclrtStream>(stream), device).unwrap();
}

void clear_last_error() { (void)aclrtGetLastError(ACL_RT_THREAD_LEVEL); }

std::string take_last_error() {
  const aclError code = aclrtGetLastError(ACL_RT_THREAD_LEVEL);
  return code == ACL_SUCCESS ? std::string() : acl_text(code);
}

}  // namespace npu_runtime
}  // namespace detail
}  // namespace ms_ext

#endif
