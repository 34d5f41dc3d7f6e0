// LeakyRelu and its backward on ATen (CPU).
#include <ATen/ops/leaky_relu.h>
#include <ATen/ops/leaky_relu_backward.h>

#include <ms_ext/ms_ext.h>

namespace {
constexpr double kNegativeSlope = 0.01;  // torch.nn.functional.leaky_relu's default
}

// y = leaky_relu(x)
MS_EXT_KERNEL(LeakyRelu, ms_ext::Signature().inputs(1).outputs(1).dtypes(ms_ext::floating_types())) {
  const at::Tensor &x = call.input(0);
  at::leaky_relu_out(call.output_like(0, x), x, kNegativeSlope);
}

// dx = LeakyReluGrad(dy, x)
MS_EXT_KERNEL(LeakyReluGrad, ms_ext::Signature().inputs(2).outputs(1).dtypes(ms_ext::floating_types())) {
  const at::Tensor &dy = call.input(0), &x = call.input(1);
  at::leaky_relu_backward_out(call.output_like(0, x), dy, x, kNegativeSlope, /*self_is_result=*/false);
}
