// ms_ext: write a MindSpore aot entry point on top of ATen in a few lines.
//
//   #include <ATen/ops/leaky_relu.h>
//   #include <ms_ext/ms_ext.h>
//
//   struct Slope {
//     double value;
//     explicit Slope(const ms_ext::Attrs &attrs) : value(attrs.get<double>("negative_slope", 0.01)) {}
//   };
//
//   MS_EXT_KERNEL_WITH_STATE(LeakyRelu, Slope, ms_ext::Signature().inputs(1).outputs(1)
//                                                  .dtypes(ms_ext::floating_types())
//                                                  .attr<double>("negative_slope")
//                                                  .shapes(ms_ext::same_shape_as_input0)
//                                                  .types(ms_ext::same_type_as_input0)) {
//     at::leaky_relu_out(call.output(0), call.input(0), state.value);
//   }
//
// This defines the functions `ops.Custom("lib.so:LeakyRelu", ..., func_type="aot")` uses:
//   int LeakyRelu(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *stream,
//                 void *extra)                          the launch
//   int LeakyReluInit(int *ndims, int64_t **shapes, const char **dtypes, void *extra)
//                                                         parses the state once per kernel (MindSpore's kernel data)
//   std::vector<int64_t> LeakyReluInferShape(int *ndims, int64_t **shapes, void *extra)
//                                                         C++ shape inference (dynamic shapes in GRAPH_MODE)
//   const char *ms_ext_signature_LeakyRelu(void)          the signature, for aot_ops' Python-side checks
//   int ms_ext_output_types_LeakyRelu(...)                the dtype rule on MindSpore dtype names, for aot_ops
// The state is parsed from the declared attributes once per kernel (Init) and once per C++ shape inference; rules
// read it with `args.state<Slope>()`. Before the body runs, the arguments are checked against the signature (parameter count, shapes, dtypes, output
// buffers against the rules) and viewed as at::Tensor without copying; every exception reaches Python as
// "LeakyRelu: <cause>".
#pragma once

#include <string>

#include <ms_ext/attrs.h>
#include <ms_ext/c_api.h>
#include <ms_ext/call.h>
#include <ms_ext/entry.h>
#include <ms_ext/infer.h>
#include <ms_ext/signature.h>
#include <ms_ext/state.h>

// A kernel whose body sees `ms_ext::Call &call` and `const STATE &state` (STATE built from the attributes).
#define MS_EXT_KERNEL_WITH_STATE(NAME, STATE, SIGNATURE)                                                         \
  static constexpr ::ms_ext::Signature ms_ext_signature_object_##NAME = (SIGNATURE);                            \
  extern "C" MS_EXT_EXPORT const char *ms_ext_signature_##NAME(void) {                                         \
    static const std::string text = ms_ext_signature_object_##NAME.describe();                                 \
    return text.c_str();                                                                                       \
  }                                                                                                            \
  extern "C" MS_EXT_EXPORT int NAME##Init(int *ndims, int64_t **shapes, const char **, void *extra) {           \
    return ::ms_ext::detail::init_entry<STATE>(#NAME, ms_ext_signature_object_##NAME, ndims, shapes, extra);    \
  }                                                                                                            \
  extern "C" MS_EXT_EXPORT ::ms_ext::detail::InferShapeResult<ms_ext_signature_object_##NAME.num_outputs()>     \
  NAME##InferShape(int *ndims, int64_t **shapes, void *extra) {                                                \
    return ::ms_ext::detail::infer_shape_entry<ms_ext_signature_object_##NAME.num_outputs(), STATE>(            \
        #NAME, ms_ext_signature_object_##NAME, ndims, shapes, extra);                                          \
  }                                                                                                            \
  extern "C" MS_EXT_EXPORT int ms_ext_output_types_##NAME(int num_inputs, const char *const *input_dtypes,       \
                                                          const char **output_dtypes, int capacity) {          \
    return ::ms_ext::detail::output_types_entry(#NAME, ms_ext_signature_object_##NAME, num_inputs, input_dtypes, \
                                                output_dtypes, capacity);                                      \
  }                                                                                                            \
  static void ms_ext_kernel_body_##NAME(::ms_ext::Call &call, const STATE &state);                             \
  extern "C" MS_EXT_EXPORT int NAME(int nparam, void **params, int *ndims, int64_t **shapes,                    \
                                    const char **dtypes, void *stream, void *extra) {                          \
    return ::ms_ext::detail::launch_entry<STATE>(#NAME, ms_ext_signature_object_##NAME,                        \
                                                 {nparam, params, ndims, shapes, dtypes, stream, extra},       \
                                                 &ms_ext_kernel_body_##NAME);                                  \
  }                                                                                                            \
  static void ms_ext_kernel_body_##NAME(::ms_ext::Call &call, [[maybe_unused]] const STATE &state)

// An entry point whose numbers of inputs and outputs are decided per call: one symbol serving operators of every
// arity (the generic ATen entry, the program entry). There is no static Signature, hence no exported signature
// text and no C++ shape rule from ms_ext; `LAUNCH(const char *name, const ms_ext::detail::RawArgs &raw)` checks
// the call itself and runs it under ms_ext's exception boundary. The Init hook builds STATE from the attributes
// once per kernel, as for MS_EXT_KERNEL_WITH_STATE.
#define MS_EXT_RUNTIME_ARITY_ENTRY(NAME, STATE, LAUNCH)                                                         \
  extern "C" MS_EXT_EXPORT int NAME##Init(int *ndims, int64_t **shapes, const char **, void *extra) {           \
    static constexpr ::ms_ext::Signature kNoScratch{};                                                         \
    return ::ms_ext::detail::init_entry<STATE>(#NAME, kNoScratch, ndims, shapes, extra);                       \
  }                                                                                                            \
  extern "C" MS_EXT_EXPORT int NAME(int nparam, void **params, int *ndims, int64_t **shapes,                    \
                                    const char **dtypes, void *stream, void *extra) {                          \
    ::ms_ext::detail::check_parameter_count(#NAME, nparam);                                                    \
    return LAUNCH(#NAME, ::ms_ext::detail::RawArgs{nparam, params, ndims, shapes, dtypes, stream, extra});      \
  }

// A kernel without attributes: the body sees `ms_ext::Call &call`.
#define MS_EXT_KERNEL(NAME, SIGNATURE) \
  MS_EXT_KERNEL_WITH_STATE(NAME, ::ms_ext::NoState, (SIGNATURE).no_attributes())
