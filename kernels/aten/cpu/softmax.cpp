// Softmax on ATen (CPU) over `dim` (int attribute, default -1), and its backward.
#include <ATen/ops/_softmax.h>
#include <ATen/ops/_softmax_backward_data.h>

#include <ms_ext/ms_ext.h>

namespace {
struct Dim {
  int64_t value;
  explicit Dim(const ms_ext::Attrs &attrs) : value(attrs.get<int64_t>("dim", -1)) {}
};
}  // namespace

// y = softmax(x, dim)
MS_EXT_KERNEL_WITH_STATE(Softmax, Dim, ms_ext::Signature().inputs(1).outputs(1).dtypes(ms_ext::floating_types())
                             .attr<int64_t>("dim")
                                           .shapes(ms_ext::same_shape_as_input0).types(ms_ext::same_type_as_input0)) {
  const at::Tensor &x = call.input(0);
  at::_softmax_out(call.output(0), x, ms_ext::wrap_dim(state.value, x.dim()), /*half_to_float=*/false);
}

// dx = SoftmaxGrad(dy, y), with y the forward output.
MS_EXT_KERNEL_WITH_STATE(SoftmaxGrad, Dim, ms_ext::Signature().inputs(2).outputs(1).dtypes(ms_ext::floating_types())
                             .attr<int64_t>("dim")
                                               .shapes(ms_ext::shapes_of_inputs_after_first)
                                               .types(ms_ext::types_of_inputs_after_first)) {
  const at::Tensor &dy = call.input(0), &y = call.input(1);
  at::_softmax_backward_data_out(call.output(0), dy, y, ms_ext::wrap_dim(state.value, y.dim()), y.scalar_type());
}
