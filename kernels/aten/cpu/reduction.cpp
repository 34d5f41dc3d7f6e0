// Reductions on ATen (CPU): Sum over all elements, Max over the last dimension (values and int64 indices),
// and their backwards.
#include <ATen/ops/expand.h>
#include <ATen/ops/max.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/value_selecting_reduction_backward.h>

#include <ms_ext/ms_ext.h>

namespace {
// The dtypes ATen's CPU kernels handle: max has no complex or wide-unsigned kernel, sum handles everything.
const ms_ext::DtypeSet kMaxTypes = ms_ext::floating_types() | ms_ext::integral_types() | ms_ext::bool_type();
const ms_ext::DtypeSet kSumTypes = kMaxTypes | ms_ext::complex_types() | ms_ext::barebones_unsigned_types();
constexpr int64_t kMaxDim = -1;
}  // namespace

// out = sum(x), a 0-dim tensor; integer and bool inputs sum to int64 as in torch.
MS_EXT_KERNEL(Sum, ms_ext::Signature().inputs(1).outputs(1).dtypes(kSumTypes)) {
  const at::Tensor &x = call.input(0);
  const at::ScalarType type = at::isIntegralType(x.scalar_type(), /*includeBool=*/true) ? at::kLong : x.scalar_type();
  at::sum_out(call.output(0, {}, type), x, at::IntArrayRef{}, /*keepdim=*/false, type);
}

// dx = SumGrad(dout, x): dout broadcast to x's shape.
MS_EXT_KERNEL(SumGrad, ms_ext::Signature().inputs(2).outputs(1).dtypes(kSumTypes)) {
  const at::Tensor &dout = call.input(0), &x = call.input(1);
  at::Tensor &dx = call.output_like(0, x);
  if (!at::isFloatingType(x.scalar_type()) && !x.is_complex()) {
    dx.zero_();  // integer and bool inputs are not differentiable
    return;
  }
  dx.copy_(dout.expand(x.sizes()));
}

// (values, indices) = max(x, dim=-1)
MS_EXT_KERNEL(MaxDim, ms_ext::Signature().inputs(1).outputs(2).dtypes(kMaxTypes)) {
  const at::Tensor &x = call.input(0);
  // torch.max(x, -1) on a 0-dim tensor gives 0-dim results; otherwise the last dimension goes away.
  const at::IntArrayRef reduced = x.dim() == 0 ? x.sizes() : x.sizes().slice(0, x.dim() - 1);
  at::Tensor &values = call.output(0, reduced, x.scalar_type());
  at::Tensor &indices = call.output(1, reduced, at::kLong);
  at::max_out(values, indices, x, kMaxDim);
}

// dx = MaxDimGrad(dvalues, x, indices): dvalues scattered to the selected positions, zero elsewhere.
MS_EXT_KERNEL(MaxDimGrad, ms_ext::Signature().inputs(3).outputs(1).dtypes(kMaxTypes)) {
  const at::Tensor &dvalues = call.input(0), &x = call.input(1), &indices = call.input(2);
  if (indices.scalar_type() != at::kLong)
    throw std::invalid_argument(std::string("input 2 (indices) must be int64, got ") +
                                ms_ext::ms_dtype_name(indices.scalar_type()));
  if (!at::isFloatingType(x.scalar_type())) {
    call.output_like(0, x).zero_();
    return;
  }
  call.set_output(0, at::value_selecting_reduction_backward_symint(dvalues, kMaxDim, indices,
                                                                   c10::fromIntArrayRefSlow(x.sizes()),
                                                                   /*keepdim=*/false)
                         .to(x.scalar_type()));
}
