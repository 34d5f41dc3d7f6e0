// LeakyRelu and its backward on ATen (CPU). Attribute: negative_slope (float, default 0.01 as in torch).
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/leaky_relu_backward.h>

#include <ms_ext/ms_ext.h>

namespace {

struct NegativeSlope {
  double value;
  // The default keeps the classic hand-written `ops.Custom("lib:LeakyRelu", ...)` (no attributes) working.
  explicit NegativeSlope(const ms_ext::Attrs &attrs) : value(attrs.get<double>("negative_slope", 0.01)) {}
};

}  // namespace

// y = leaky_relu(x, negative_slope)
MS_EXT_KERNEL_WITH_STATE(LeakyRelu, NegativeSlope,
                         ms_ext::Signature().inputs(1).outputs(1).dtypes(ms_ext::floating_types())
                             .attr<double>("negative_slope")
                             .shapes(ms_ext::same_shape_as_input0).types(ms_ext::same_type_as_input0)) {
  at::leaky_relu_out(call.output(0), call.input(0), state.value);
}

// dx = LeakyReluGrad(dy, x)
MS_EXT_KERNEL_WITH_STATE(LeakyReluGrad, NegativeSlope,
                         ms_ext::Signature().inputs(2).outputs(1).dtypes(ms_ext::floating_types())
                             .attr<double>("negative_slope")
                             .shapes(ms_ext::shapes_of_inputs_after_first)
                             .types(ms_ext::types_of_inputs_after_first)) {
  at::leaky_relu_backward_out(call.output(0), call.input(0), call.input(1), state.value, /*self_is_result=*/false);
}
