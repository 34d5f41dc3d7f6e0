// Softmax over the last dimension on ATen (CPU), and its backward.
#include <ATen/ops/_softmax.h>
#include <ATen/ops/_softmax_backward_data.h>

#include <ms_ext/ms_ext.h>

namespace {
constexpr int64_t kDim = -1;
}

// y = softmax(x, dim=-1)
MS_EXT_KERNEL(Softmax, ms_ext::Signature().inputs(1).outputs(1).dtypes(ms_ext::floating_types())) {
  const at::Tensor &x = call.input(0);
  at::_softmax_out(call.output_like(0, x), x, kDim, /*half_to_float=*/false);
}

// dx = SoftmaxGrad(dy, y), with y the forward output.
MS_EXT_KERNEL(SoftmaxGrad, ms_ext::Signature().inputs(2).outputs(1).dtypes(ms_ext::floating_types())) {
  const at::Tensor &dy = call.input(0), &y = call.input(1);
  at::_softmax_backward_data_out(call.output_like(0, y), dy, y, kDim, y.scalar_type());
}
