// out = scale * tanh(x), and its backward, as MindSpore aot entry points (ms_ext).
#include <ATen/ops/mul.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/tanh_backward.h>

#include <ms_ext/ms_ext.h>

namespace {

struct Scale {  // parsed once per kernel, in the Init hook
  double value;
  explicit Scale(const ms_ext::Attrs &attrs) : value(attrs.get<double>("scale", 1.0)) {}
};

}  // namespace

MS_EXT_KERNEL_WITH_STATE(ScaledTanh, Scale,
                         ms_ext::Signature().inputs(1).outputs(1).dtypes(ms_ext::floating_types()).attr<double>("scale")
                             .shapes(ms_ext::same_shape_as_input0).types(ms_ext::same_type_as_input0)) {
  at::tanh_out(call.output(0), call.input(0));
  call.output(0).mul_(state.value);
}

// dx = ScaledTanhGrad(dout, x) = dout * scale * (1 - tanh(x)^2)
MS_EXT_KERNEL_WITH_STATE(ScaledTanhGrad, Scale,
                         ms_ext::Signature().inputs(2).outputs(1).dtypes(ms_ext::floating_types()).attr<double>("scale")
                             .shapes(ms_ext::same_shape_as_input0).types(ms_ext::same_type_as_input0)) {
  at::tanh_backward_out(call.output(0), at::mul(call.input(0), state.value), at::tanh(call.input(1)));
}
