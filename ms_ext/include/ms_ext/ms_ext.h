// ms_ext: write a MindSpore aot entry point on top of ATen in a few lines.
//
//   #include <ms_ext/ms_ext.h>
//   #include <ATen/ops/leaky_relu.h>
//
//   MS_EXT_KERNEL(LeakyRelu, ms_ext::Signature().inputs(1).outputs(1).dtypes(ms_ext::floating_types())) {
//     const at::Tensor &x = call.input(0);
//     at::leaky_relu_out(call.output_like(0, x), x, 0.01);
//   }
//
// This defines `extern "C" int LeakyRelu(int nparam, void **params, int *ndims, int64_t **shapes,
// const char **dtypes, void *stream, void *extra)`, the function `ops.Custom("lib.so:LeakyRelu", ...,
// func_type="aot")` calls. Before the body runs, the arguments are checked against the signature (parameter
// count, shapes, dtypes) and viewed as at::Tensor without copying; every exception the body throws reaches Python
// as "LeakyRelu: <cause>".
#pragma once

#include <ms_ext/c_api.h>
#include <ms_ext/call.h>
#include <ms_ext/detail/boundary.h>
#include <ms_ext/signature.h>

// Also exports `const char *ms_ext_signature_<NAME>(void)` (Signature::describe()), which aot_ops reads to check calls
// in Python with the same rules, before MindSpore launches anything.
#define MS_EXT_KERNEL(NAME, SIGNATURE)                                                                         \
  static const ::ms_ext::Signature &ms_ext_signature_object_##NAME() {                                         \
    static const ::ms_ext::Signature signature = (SIGNATURE);                                                  \
    return signature;                                                                                          \
  }                                                                                                            \
  extern "C" MS_EXT_EXPORT const char *ms_ext_signature_##NAME(void) {                                         \
    static const std::string text = ms_ext_signature_object_##NAME().describe();                               \
    return text.c_str();                                                                                       \
  }                                                                                                            \
  static void ms_ext_kernel_body_##NAME(::ms_ext::Call &call);                                                 \
  extern "C" MS_EXT_EXPORT int NAME(int nparam, void **params, int *ndims, int64_t **shapes,                   \
                                    const char **dtypes, void *stream, void *extra) {                          \
    const ::ms_ext::detail::RawArgs raw{nparam, params, ndims, shapes, dtypes, stream, extra};                 \
    return ::ms_ext::detail::guarded(#NAME, [&] {                                                              \
      ::ms_ext::Call call(#NAME, ms_ext_signature_object_##NAME(), raw);                                       \
      ms_ext_kernel_body_##NAME(call);                                                                         \
      call.check_outputs_intact();                                                                             \
    });                                                                                                        \
  }                                                                                                            \
  static void ms_ext_kernel_body_##NAME(::ms_ext::Call &call)
