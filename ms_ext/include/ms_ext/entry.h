// Not for direct use: what the MS_EXT_KERNEL macros expand to: the launch function, the Init hook and the C++
// shape inference MindSpore looks up by name (<Func>, <Func>Init, <Func>InferShape), each behind the exception
// boundary.
#pragma once

#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <ms_ext/attrs.h>
#include <ms_ext/c_api.h>
#include <ms_ext/call.h>
#include <ms_ext/detail/boundary.h>
#include <ms_ext/detail/placement.h>
#include <ms_ext/detail/raw_args.h>
#include <ms_ext/detail/shape_arrays.h>
#include <ms_ext/infer.h>
#include <ms_ext/signature.h>
#include <ms_ext/state.h>

namespace ms_ext {
namespace detail {

// MindSpore calls `std::vector<int64_t> <Func>InferShape(...)` for one output and
// `std::vector<std::vector<int64_t>> <Func>InferShape(...)` for several. std::vector has the same layout in both
// C++ ABIs, so returning it from new-ABI code to MindSpore is safe (std::string would not be).
template <int NumOutputs>
using InferShapeResult = std::conditional_t<NumOutputs == 1, std::vector<int64_t>, std::vector<std::vector<int64_t>>>;

// MindSpore reads the C++ shape inference's result as one shape or as several according to the primitive's
// `multi_output` attribute (set from its reg_info), not according to the function it calls: a mismatch would make
// it misread the returned vector. A kernel refuses to answer a primitive that expects the other form.
inline void check_output_form(const Attrs &attrs, bool several) {
  if (attrs.has("multi_output") && attrs.get<bool>("multi_output") != several)
    throw std::invalid_argument(std::string("the primitive declares ") + (several ? "one output" : "several outputs") +
                                " (its reg_info), but the kernel has " + (several ? "several" : "one"));
}

// The shape rule sees the state parsed from the attributes here, once (InferShape runs before, and apart from, the
// kernel's Init, so it cannot use Init's state).
template <int NumOutputs, typename State>
InferShapeResult<NumOutputs> infer_shape_entry(const char *name, const Signature &sig, int *ndims, int64_t **shapes,
                                               void *extra) {
  InferShapeResult<NumOutputs> result;
  guarded(name, [&] {
    if (sig.shape_rule() == nullptr)
      throw std::logic_error("the kernel has no shape rule (Signature::shapes); give out_shape in Python instead");
    const Attrs attrs(extra);
    check_output_form(attrs, NumOutputs > 1);
    std::vector<Shape> input_shapes = read_input_shapes(sig.num_inputs(), ndims, shapes);
    const State state(attrs.declared_by(sig.attributes()));
    std::vector<Shape> out = sig.shape_rule()(ShapeArgs(std::move(input_shapes), attrs, StateRef::of(state)));
    if (static_cast<int>(out.size()) != NumOutputs)
      throw std::logic_error("the shape rule returned " + std::to_string(out.size()) + " shapes for " +
                             std::to_string(NumOutputs) + " outputs");
    if constexpr (NumOutputs == 1) {
      result = std::move(out[0]);
    } else {
      result = std::move(out);
    }
  });
  return result;
}

// A C caller's garbage (NULL arrays, a count or capacity that does not fit the kernel) is refused before any array
// is touched.
inline void check_output_types_arguments(const Signature &sig, int num_inputs, const char *const *input_dtypes,
                                         const char **output_dtypes, int capacity) {
  if (num_inputs != sig.num_inputs())
    throw std::invalid_argument("expected " + std::to_string(sig.num_inputs()) + " input(s), got " +
                                std::to_string(num_inputs));
  if (input_dtypes == nullptr && num_inputs > 0) throw std::invalid_argument("input_dtypes is NULL");
  if (output_dtypes == nullptr) throw std::invalid_argument("output_dtypes is NULL");
  if (capacity < sig.num_outputs())
    throw std::invalid_argument("capacity is " + std::to_string(capacity) + ", but the kernel has " +
                                std::to_string(sig.num_outputs()) + " output dtype(s) to write");
}

// Output dtypes for aot_ops, which infers them in Python (as MindSpore tensor types; MindSpore turns a 0-dim output
// whose type came from a C++ InferType into a Python scalar in GRAPH_MODE). Dtypes travel as MindSpore's names
// (kMsDtypes); the output names point into that static table. A C function: failures return -1 with the text in
// ms_ext_last_error.
inline int output_types_entry(const char *name, const Signature &sig, int num_inputs, const char *const *input_dtypes,
                              const char **output_dtypes, int capacity) noexcept {
  return guarded_status(name, [&] {
    if (sig.type_rule() == nullptr) throw std::logic_error("the kernel has no dtype rule (Signature::types)");
    check_output_types_arguments(sig, num_inputs, input_dtypes, output_dtypes, capacity);
    std::vector<at::ScalarType> dtypes;
    for (int i = 0; i < num_inputs; ++i) dtypes.push_back(scalar_type_from_ms(input_dtypes[i]));
    sig.check_input_dtypes(dtypes);
    const std::vector<at::ScalarType> out = sig.type_rule()(TypeArgs(dtypes));
    if (static_cast<int>(out.size()) != sig.num_outputs())
      throw std::logic_error("the dtype rule returned " + std::to_string(out.size()) + " dtypes for " +
                             std::to_string(sig.num_outputs()) + " outputs");
    for (size_t k = 0; k < out.size(); ++k) {
      output_dtypes[k] = ms_dtype_name_or_null(out[k]);
      if (output_dtypes[k] == nullptr)
        throw std::logic_error(std::string("the dtype rule produced ") + c10::toString(out[k]) +
                               ", which MindSpore has no dtype for");
    }
  });
}

// Init keeps the kernel's state in `extra`, so it cannot run without a usable one. MindSpore always passes its
// AotExtra; a C caller's NULL or garbage is refused with "<Operator>: <cause>" as the last error.
inline bool init_extra_usable(const char *name, void *extra) {
  std::string cause;
  if (extra == nullptr) {
    cause = "Init needs the extra argument (MindSpore's AotExtra, which keeps the kernel's state), and it is NULL";
  } else if (ms_ext_extra_check(static_cast<ms_ext_extra *>(extra)) != 0) {
    cause = ms_ext_last_error();
  } else {
    return true;
  }
  ms_ext_set_last_error((std::string(name) + ": " + cause).c_str());
  return false;
}

// The Init hook: parses the state and requests scratch workspaces once per kernel. It never fails towards
// MindSpore, which would report an empty message: a failure is stored and raised by the first launch. Only an
// extra it cannot keep the state in (never MindSpore's) makes it return non-zero.
template <typename State>
int init_entry(const char *name, const Signature &sig, int *ndims, int64_t **shapes, void *extra) {
  if (!init_extra_usable(name, extra)) return 1;
  auto *data = new KernelData<State>();
  try {
    const Attrs attrs(extra);
    data->state.emplace(attrs.declared_by(sig.attributes()));
    if (sig.num_scratch() > 0) {
      const std::vector<int64_t> bytes = sig.scratch_rule()(
          ShapeArgs(read_input_shapes(sig.num_inputs(), ndims, shapes), attrs, StateRef::of(*data->state)));
      bool known = static_cast<int>(bytes.size()) == sig.num_scratch();
      for (int64_t b : bytes) known = known && b >= 0;
      if (known) {  // a size depending on a dynamic dimension is allocated per call instead
        const std::vector<size_t> sizes(bytes.begin(), bytes.end());
        if (ms_ext_extra_set_workspace(static_cast<ms_ext_extra *>(extra), sizes.data(), sizes.size()) != 0)
          throw std::runtime_error(ms_ext_last_error());
        data->workspaces = sig.num_scratch();
      }
    }
  } catch (...) {
    data->init_error = describe_current_exception();
    data->state.reset();
    ms_ext_set_last_error((std::string(name) + ": " + data->init_error).c_str());
  }
  KernelDataBase *base = data;
  if (ms_ext_extra_set_kernel_data(static_cast<ms_ext_extra *>(extra), base) != 0) {
    ms_ext_set_last_error((std::string(name) + ": " + ms_ext_last_error()).c_str());
    delete data;
    return 1;
  }
  return 0;
}

template <typename State>
KernelData<State> *kernel_data(void *extra) {
  void *data = ms_ext_extra_kernel_data(static_cast<ms_ext_extra *>(extra));
  return data == nullptr ? nullptr : static_cast<KernelData<State> *>(static_cast<KernelDataBase *>(data));
}

// The state a launch runs with: the one its Init hook parsed (refused when Init failed), or, when no Init ran (a
// harness call), one parsed now from `attrs` into `local`. Every entry point, the generic ATen one included, gets
// it here.
template <typename State>
const State &launch_state(const Attrs &attrs, KernelData<State> *data, std::optional<State> &local) {
  if (data == nullptr) return local.emplace(attrs);
  if (!data->init_error.empty() || !data->state)
    throw std::runtime_error("kernel initialisation failed: " + data->init_error);
  return *data->state;
}

// The entries whose arity comes from their attributes compute with the parameter count before any Call checks
// it, so an absurd one is refused first, by name.
inline void check_parameter_count(const char *name, int nparam) {
  const std::string fault = parameter_count_fault(nparam);
  if (!fault.empty()) raise(name, fault);
}

template <typename State, typename Body, typename Placement = DefaultPlacement>
int launch_entry(const char *name, const Signature &sig, const RawArgs &raw, Body body) {
  guarded(name, [&] {
    typename Placement::Scope scope(raw);
    const Attrs attrs(raw.extra);
    KernelData<State> *data = kernel_data<State>(raw.extra);
    std::optional<State> local;
    const State &state = launch_state(attrs.declared_by(sig.attributes()), data, local);
    Call call(name, sig, raw, attrs, data != nullptr ? data->workspaces : 0, scope.device(), /*none_inputs=*/false,
              StateRef::of(state));
    body(call, state);
    call.check_outputs_intact();
    scope.finish();
  });
  return 0;
}

}  // namespace detail
}  // namespace ms_ext
