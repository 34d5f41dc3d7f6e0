// What the C++ generated from Ascend C kernel declarations (aot_ops.ascendc.load for a user's kernels, setup.py for
// the bundled ones) needs at run time: the emulator settings and path counts of the bundled Ascend C library (one
// setting and one count per process, whichever library a kernel lives in), the helpers compiled tiling functions
// use, and the ATen fallback called by schema name.
//
// Only C functions cross between the libraries (looked up with dlsym), as everywhere in this project.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "ascendc_emu/launch.h"
#include "kernel_operator.h"
#include "tiling_support.h"

namespace ascendc_user {

// ---- the bundled library's process-wide settings and counts --------------------------------------------------------

class BundledRuntime {
 public:
  explicit BundledRuntime(const char *library) {
    void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) throw std::runtime_error(std::string("cannot open the Ascend C runtime ") + library);
    order_ = reinterpret_cast<const char *(*)()>(dlsym(handle, "ascendc_emulator_order"));
    ub_bytes_ = reinterpret_cast<int64_t (*)()>(dlsym(handle, "ascendc_emulator_ub_bytes"));
    note_ = reinterpret_cast<void (*)(const char *, const char *, const char *)>(dlsym(handle, "ascendc_note_path"));
    if (order_ == nullptr || ub_bytes_ == nullptr || note_ == nullptr)
      throw std::runtime_error(std::string(library) + " lacks the emulator settings or path counts: reinstall aot_ops");
  }
  // Inside the bundled library itself: the same functions, linked.
  BundledRuntime(const char *(*order)(), int64_t (*ub_bytes)(), void (*note)(const char *, const char *, const char *))
      : order_(order), ub_bytes_(ub_bytes), note_(note) {}

  ascendc_emu::LaunchOptions launch_options() const {
    ascendc_emu::LaunchOptions options;
    ascendc_emu::parse_core_order(order_(), &options.order);  // the bundled library only holds valid names
    options.ub_bytes = static_cast<size_t>(ub_bytes_());
    return options;
  }

  void note_path(const char *op, const char *path, const std::string &reason = "") const {
    note_(op, path, reason.c_str());
  }

 private:
  const char *(*order_)() = nullptr;
  int64_t (*ub_bytes_)() = nullptr;
  void (*note_)(const char *, const char *, const char *) = nullptr;
};

// ---- helpers of compiled tiling functions (tiling_support.h) ------------------------------------------------------

using namespace ascendc_tiling_support;

// A kernel argument of C type T from a tiling value, or the reason it does not fit.
template <typename T>
std::string fits(const char *name, int64_t value) {
  if (value < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
      (std::numeric_limits<T>::max() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
       value > static_cast<int64_t>(std::numeric_limits<T>::max())))
    return std::string(name) + " = " + std::to_string(value) + " does not fit the kernel's argument type";
  return {};
}

// ---- the ATen fallback --------------------------------------------------------------------------------------------

inline std::string describe(const at::Tensor &t) {
  std::string text = c10::toString(t.scalar_type());
  text += " [";
  for (int64_t i = 0; i < t.dim(); ++i) text += (i ? ", " : "") + std::to_string(t.size(i));
  return text + "]";
}

// Runs `qualified` ("aten::mul.Tensor") on `inputs` (its tensor arguments in order; another argument takes the value
// `named` gives it, else its default) and copies its results into `outputs`, checking each result's shape and dtype against the buffer.
// `why` (the kernel's unmet requirement) is named in the error when the fallback refuses the inputs too.
inline void run_fallback(const char *qualified, const std::string &why, const std::vector<at::Tensor> &inputs,
                         const std::vector<at::Tensor> &outputs,
                         const std::vector<std::pair<std::string, c10::IValue>> &named = {}) {
  const std::string full(qualified);
  const size_t dot = full.find('.', full.find("::") + 2);
  const std::string name = full.substr(0, dot), overload = dot == std::string::npos ? "" : full.substr(dot + 1);
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
  torch::jit::Stack stack;
  size_t next = 0;
  for (const c10::Argument &arg : op.schema().arguments()) {
    auto bound = std::find_if(named.begin(), named.end(), [&](const auto &n) { return n.first == arg.name(); });
    if (arg.type()->kind() == c10::TypeKind::TensorType && next < inputs.size()) {
      stack.emplace_back(inputs[next++]);
    } else if (bound != named.end()) {
      stack.push_back(bound->second);
    } else if (arg.default_value().has_value()) {
      stack.push_back(*arg.default_value());
    } else {
      throw std::invalid_argument(full + ": argument '" + arg.name() + "' has no default and is not a kernel input");
    }
  }
  try {
    op.callBoxed(&stack);
  } catch (const c10::Error &e) {
    throw std::invalid_argument(full + " (the fallback, run as " + why + "): " + e.what_without_backtrace());
  }
  if (stack.size() != outputs.size())
    throw std::logic_error(full + " returned " + std::to_string(stack.size()) + " results for " +
                           std::to_string(outputs.size()) + " outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const at::Tensor result = stack[i].toTensor();
    if (result.sizes() != outputs[i].sizes() || result.scalar_type() != outputs[i].scalar_type())
      throw std::invalid_argument(full + " gives output " + std::to_string(i) + " as " + describe(result) +
                                  ", the operator's output is " + describe(outputs[i]) +
                                  " (the shape and dtype its declaration infers: output_like, or the fallback's)");
    const_cast<at::Tensor &>(outputs[i]).copy_(result);
  }
}

inline GM_ADDR gm(const at::Tensor &t) { return static_cast<GM_ADDR>(t.data_ptr()); }

}  // namespace ascendc_user
