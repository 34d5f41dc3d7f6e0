// GELU on ATen (CPU), exact or tanh-approximated (string attribute `approximate`: "none" or "tanh"), and its
// backward.
#include <ATen/ops/gelu.h>
#include <ATen/ops/gelu_backward.h>

#include <ms_ext/ms_ext.h>

namespace {

struct Approximate {
  std::string value;
  // Validated once, when MindSpore initialises the kernel; a bad value is reported by the first launch.
  explicit Approximate(const ms_ext::Attrs &attrs) : value(attrs.get<std::string>("approximate", "none")) {
    if (value != "none" && value != "tanh")
      throw std::invalid_argument("attribute 'approximate' must be \"none\" or \"tanh\", got \"" + value + "\"");
  }
};

}  // namespace

// y = gelu(x, approximate)
MS_EXT_KERNEL_WITH_STATE(Gelu, Approximate, ms_ext::Signature().inputs(1).outputs(1).dtypes(ms_ext::floating_types())
                             .attr<std::string>("approximate")
                                                .shapes(ms_ext::same_shape_as_input0)
                                                .types(ms_ext::same_type_as_input0)) {
  at::gelu_out(call.output(0), call.input(0), state.value);
}

// dx = GeluGrad(dy, x)
MS_EXT_KERNEL_WITH_STATE(GeluGrad, Approximate,
                         ms_ext::Signature().inputs(2).outputs(1).dtypes(ms_ext::floating_types())
                             .attr<std::string>("approximate")
                             .shapes(ms_ext::shapes_of_inputs_after_first)
                             .types(ms_ext::types_of_inputs_after_first)) {
  at::gelu_backward_out(call.output(0), call.input(0), call.input(1), state.value);
}
