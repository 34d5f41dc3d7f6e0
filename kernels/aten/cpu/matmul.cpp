// Matmul on ATen (CPU) with torch.matmul's semantics (1-D, 2-D, batched and broadcast operands), and its backward.
#include <ATen/ops/matmul.h>
#include <torch/csrc/autograd/autograd.h>

#include <ms_ext/ms_ext.h>

namespace {
const ms_ext::DtypeSet kMatmulTypes = ms_ext::floating_types() | ms_ext::integral_types() | ms_ext::complex_types();
}

// out = matmul(a, b)
MS_EXT_KERNEL(Matmul, ms_ext::Signature().inputs(2).outputs(1).dtypes(kMatmulTypes)) {
  const at::Tensor &a = call.input(0), &b = call.input(1);
  at::matmul_out(call.output(0, at::matmul(ms_ext::meta(a), ms_ext::meta(b))), a, b);
}

// (da, db) = MatmulGrad(dout, a, b)
//
// matmul's gradient differs for every rank combination (vector-matrix, batched, broadcast batch dims): rather
// than re-deriving those cases, replay the forward under torch autograd and take its vector-Jacobian product.
MS_EXT_KERNEL(MatmulGrad, ms_ext::Signature().inputs(3).outputs(2).dtypes(kMatmulTypes)) {
  const at::Tensor &dout = call.input(0), &a = call.input(1), &b = call.input(2);
  if (!a.is_floating_point() && !a.is_complex()) {
    call.output(0, ms_ext::meta(a)).zero_();
    call.output(1, ms_ext::meta(b)).zero_();
    return;
  }
  at::AutoGradMode enable_grad(true);
  at::Tensor a_leaf = a.detach().requires_grad_(true), b_leaf = b.detach().requires_grad_(true);
  at::Tensor out = at::matmul(a_leaf, b_leaf);
  auto grads = torch::autograd::grad({out}, {a_leaf, b_leaf}, {dout});
  call.set_output(0, grads[0]);
  call.set_output(1, grads[1]);
}
