// A test NPU: torch's PrivateUse1 device, named "npu" as torch_npu names it, backed by CPU memory, so that a library
// built with ms_ext's NPU placement (-DMS_EXT_TARGET_NPU) runs here without torch_npu or an NPU.
//
// It is what torch's open registration of a backend asks for: a device guard (registered in c10's guard registry,
// which c10::StreamGuard consults: it keeps a current stream per thread, as torch_npu's does), and kernels for the
// device: one boxed fallback that runs any operator with the CPU kernel over the same memory (tensors are re-viewed
// on the CPU, results re-viewed on the device, in-place results returned as the very argument they wrote). It also
// answers ms_ext's NPU runtime questions (ms_ext/detail/npu_runtime.h; built with npu_runtime_in_sources),
// with an error the test can inject, and records what the dispatcher saw: the device of the tensors and the current
// stream of every operator it ran.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/Storage.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include <ms_ext/detail/npu_runtime.h>
#include <ms_ext/ms_ext.h>

namespace {

constexpr c10::DeviceType kNpu = c10::DeviceType::PrivateUse1;

thread_local c10::DeviceIndex t_device = 0;
thread_local c10::StreamId t_stream = 0;  // 0: the default stream

std::atomic<int64_t> g_ops{0};             // operators run through the fallback
std::atomic<int64_t> g_ops_off_stream{0};  // ... while the current stream was the default one
std::atomic<int64_t> g_last_stream{0};     // the current stream when the last operator ran
std::mutex g_error_mutex;
std::string g_injected_error;  // reported by the next take_last_error (as a failed ACL launch would be)

struct TestNpuGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNpu; }
  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device old = getDevice();
    setDevice(device);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kNpu, t_device); }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kNpu && device.index() == 0, "the test npu has one device, got ", device);
    t_device = device.index();
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override { t_device = device.index(); }
  c10::Stream getStream(c10::Device device) const override { return c10::Stream(c10::Stream::UNSAFE, device, t_stream); }
  c10::Stream getDefaultStream(c10::Device device) const override { return c10::Stream(c10::Stream::DEFAULT, device); }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    const c10::Stream old = getStream(stream.device());
    t_stream = stream.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TestNpuGuard);

// The hooks torch's open registration asks of a PrivateUse1 backend (at::from_blob asks whether it is available).
struct TestNpuHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  at::Device getDeviceFromPtr(void *) const override { return c10::Device(kNpu, 0); }
};

// `tensor`'s memory seen from `device`: a tensor of the same sizes, strides and offset whose storage keeps the
// original storage alive. Built without the dispatcher (a dispatched set_ would come back to the fallback).
at::Tensor view_on(const at::Tensor &tensor, c10::Device device) {
  if (!tensor.defined()) return tensor;
  const c10::Storage &original = tensor.storage();
  auto *owner = new c10::Storage(original);
  c10::DataPtr data(original.mutable_data(), owner, [](void *p) { delete static_cast<c10::Storage *>(p); }, device);
  c10::Storage storage(c10::Storage::use_byte_size_t(), original.nbytes(), std::move(data), nullptr, false);
  const c10::DispatchKey key = device.is_cpu() ? c10::DispatchKey::CPU : c10::DispatchKey::PrivateUse1;
  at::Tensor viewed = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(key),
                                                               tensor.dtype());
  viewed.unsafeGetTensorImpl()->set_sizes_and_strides(tensor.sizes(), tensor.strides(), tensor.storage_offset());
  return viewed;
}

bool on_npu(const at::Tensor &t) { return t.defined() && t.device().type() == kNpu; }

// An argument as the CPU kernel takes it: the device's tensors viewed on the CPU, the device named as the CPU.
c10::IValue to_cpu(const c10::IValue &value) {
  if (value.isTensor()) {
    const at::Tensor &t = value.toTensor();
    return on_npu(t) ? view_on(t, c10::Device(c10::kCPU)) : t;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor &t : value.toTensorList()) list.push_back(on_npu(t) ? view_on(t, c10::kCPU) : t);
    return list;
  }
  if (value.isList() && value.toList().elementType()->isSubtypeOf(*c10::OptionalType::ofTensor())) {  // index
    c10::List<c10::IValue> converted(value.toList().elementType());
    for (const c10::IValue &item : value.toList()) converted.push_back(to_cpu(item));
    return converted;
  }
  if (value.isDevice() && value.toDevice().type() == kNpu) return c10::Device(c10::kCPU);
  return value;
}

// A result on the device: CPU tensors viewed on the device (a view of an input stays a view of its memory).
c10::IValue to_npu(const c10::IValue &value) {
  if (value.isTensor()) {
    const at::Tensor &t = value.toTensor();
    return t.defined() && t.device().is_cpu() ? view_on(t, c10::Device(kNpu, t_device)) : t;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor &t : value.toTensorList()) list.push_back(to_npu(t).toTensor());
    return list;
  }
  return value;
}

void record() {
  ++g_ops;
  g_last_stream = t_stream;
  if (t_stream == 0) ++g_ops_off_stream;
}

void run_on_cpu(const c10::OperatorHandle &op, torch::jit::Stack *stack) {
  // The views made here are ordinary tensors even when the caller runs in InferenceMode (a program does): the CPU
  // kernel of a view operator sets its result's version counter, which an inference tensor refuses.
  c10::InferenceMode ordinary_tensors(false);
  const c10::FunctionSchema &schema = op.schema();
  const size_t num_arguments = schema.arguments().size();
  const size_t first = stack->size() - num_arguments;
  std::vector<c10::IValue> arguments(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
  record();
  for (size_t i = first; i < stack->size(); ++i) (*stack)[i] = to_cpu((*stack)[i]);
  if (schema.name() == "aten::_copy_from" || schema.name() == "aten::_copy_from_and_resize") {
    // copy_ calls _copy_from(src, dst) for a device that is neither the CPU nor CUDA; the CPU has no kernel of it
    // (it copies inside copy_ itself), so the copy is done here over the CPU views, and dst returned.
    at::Tensor dst = (*stack)[first + 1].toTensor();
    const at::Tensor src = (*stack)[first].toTensor();
    if (schema.name() == "aten::_copy_from_and_resize") dst.resize_(src.sizes());
    dst.copy_(src);
    torch::jit::drop(*stack, num_arguments);
    stack->push_back(arguments[1]);
    return;
  }
  op.callBoxed(stack);
  const size_t num_returns = schema.returns().size();
  for (size_t r = 0; r < num_returns; ++r) {
    c10::IValue &result = (*stack)[stack->size() - num_returns + r];
    const c10::AliasInfo *written = schema.returns()[r].alias_info();
    bool returned_argument = false;
    if (written != nullptr && written->isWrite()) {  // add_, copy_, an out= variant: the argument it wrote
      for (size_t a = 0; a < num_arguments && !returned_argument; ++a) {
        const c10::AliasInfo *argument = schema.arguments()[a].alias_info();
        if (argument != nullptr && argument->isWrite() && argument->beforeSets() == written->beforeSets()) {
          result = arguments[a];
          returned_argument = true;
        }
      }
    }
    if (!returned_argument) result = to_npu(result);
  }
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&run_on_cpu>()); }

// torch's open registration names the device "npu", as torch_npu does (once per process).
// and gets its hooks.
const bool g_registered = [] {
  if (c10::get_privateuse1_backend() != "npu") c10::register_privateuse1_backend("npu");
  at::RegisterPrivateUse1HooksInterface(new TestNpuHooks());  // for the process's life, as torch keeps it
  return true;
}();

}  // namespace

// ms_ext's NPU runtime questions (ms_ext/detail/npu_runtime.h), answered for the test device.
namespace ms_ext::detail::npu_runtime {
c10::DeviceIndex current_device() { return t_device; }
c10::Stream stream_from_external(void *stream, c10::DeviceIndex device) {
  const auto id = static_cast<c10::StreamId>(reinterpret_cast<intptr_t>(stream));
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kNpu, device), id);
}
void clear_last_error() {}  // an injected error stands for one raised during the next call
std::string take_last_error() {
  std::lock_guard<std::mutex> lock(g_error_mutex);
  std::string error;
  error.swap(g_injected_error);
  return error;
}
}  // namespace ms_ext::detail::npu_runtime

extern "C" MS_EXT_EXPORT void npu_test_inject_error(const char *text) {
  std::lock_guard<std::mutex> lock(g_error_mutex);
  g_injected_error = text;
}
extern "C" MS_EXT_EXPORT int64_t npu_test_ops(void) { return g_ops.load(); }
extern "C" MS_EXT_EXPORT int64_t npu_test_ops_off_stream(void) { return g_ops_off_stream.load(); }
extern "C" MS_EXT_EXPORT int64_t npu_test_last_stream(void) { return g_last_stream.load(); }
extern "C" MS_EXT_EXPORT int64_t npu_test_current_stream(void) { return t_stream; }
extern "C" MS_EXT_EXPORT const char *npu_test_backend_name(void) {
  static const std::string name = c10::get_privateuse1_backend();
  return name.c_str();
}
