// Per-kernel state: what an entry point parses from its attributes once, when MindSpore initialises the kernel.
//
//   struct GeluState {
//     bool tanh;
//     explicit GeluState(const ms_ext::Attrs &attrs) : tanh(attrs.get<std::string>("approximate") == "tanh") {}
//   };
//   MS_EXT_KERNEL_WITH_STATE(Gelu, GeluState, ms_ext::Signature()...) { ... state.tanh ... }
//
// ms_ext builds the state in the kernel's Init hook and hands it to MindSpore as the kernel's data, which MindSpore
// deletes with the kernel; every launch reads it. When no Init ran (a harness call), the state is built per call.
#pragma once

#include <optional>
#include <string>

#include <ms_ext/attrs.h>
#include <ms_ext/c_api.h>

namespace ms_ext {

// For kernels without attributes.
struct NoState {
  explicit NoState(const Attrs &) {}
};

namespace detail {

// Layout-compatible with mindspore::AotKernelData (a single virtual destructor): MindSpore deletes the kernel
// data through that destructor, which runs ours.
struct KernelDataBase {
  KernelDataBase() { ms_ext_kernel_state_created(); }
  KernelDataBase(const KernelDataBase &) = delete;
  KernelDataBase &operator=(const KernelDataBase &) = delete;
  virtual ~KernelDataBase() { ms_ext_kernel_state_destroyed(); }
};

template <typename State>
struct KernelData final : KernelDataBase {
  std::optional<State> state;
  // MindSpore shows an empty message when an Init hook fails, so a failure is kept here and raised, with its
  // text, by the first launch.
  std::string init_error;
  int workspaces = 0;  // scratch buffers MindSpore was asked for (and will pass after the outputs)
};

}  // namespace detail
}  // namespace ms_ext
