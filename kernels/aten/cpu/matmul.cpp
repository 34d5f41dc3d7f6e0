// Matmul on ATen (CPU) with torch.matmul's semantics (1-D, 2-D, batched and broadcast operands), and its backward.
#include <ATen/ExpandUtils.h>
#include <ATen/ops/matmul.h>
#include <torch/csrc/autograd/autograd.h>

#include <ms_ext/ms_ext.h>

namespace {

const ms_ext::DtypeSet kMatmulTypes = ms_ext::floating_types() | ms_ext::integral_types() | ms_ext::complex_types();

// torch.matmul's output shape: broadcast batch dimensions, then the rows of `a` (unless a is 1-D) and the columns
// of `b` (unless b is 1-D). Whether the inner dimensions agree is left to ATen, which says so in its own words.
std::vector<int64_t> matmul_shape(at::IntArrayRef a, at::IntArrayRef b) {
  if (a.empty() || b.empty())
    throw std::invalid_argument("both arguments to matmul need to be at least 1D, but they are " +
                                std::to_string(a.size()) + "D and " + std::to_string(b.size()) + "D");
  const at::IntArrayRef batch_a = a.size() > 2 ? a.slice(0, a.size() - 2) : at::IntArrayRef{};
  const at::IntArrayRef batch_b = b.size() > 2 ? b.slice(0, b.size() - 2) : at::IntArrayRef{};
  std::vector<int64_t> shape = at::infer_size(batch_a, batch_b);
  if (a.size() >= 2) shape.push_back(a[a.size() - 2]);
  if (b.size() >= 2) shape.push_back(b.back());
  return shape;
}

}  // namespace

// out = matmul(a, b)
MS_EXT_KERNEL(Matmul, ms_ext::Signature().inputs(2).outputs(1).dtypes(kMatmulTypes)) {
  const at::Tensor &a = call.input(0), &b = call.input(1);
  if (a.scalar_type() != b.scalar_type())
    throw std::invalid_argument(std::string("expected both operands to have the same dtype, got ") +
                                ms_ext::ms_dtype_name(a.scalar_type()) + " and " + ms_ext::ms_dtype_name(b.scalar_type()));
  at::matmul_out(call.output(0, matmul_shape(a.sizes(), b.sizes()), a.scalar_type()), a, b);
}

// (da, db) = MatmulGrad(dout, a, b)
//
// matmul's gradient differs for every rank combination (vector-matrix, batched, broadcast batch dims): rather
// than re-deriving those cases, replay the forward under torch autograd and take its vector-Jacobian product.
MS_EXT_KERNEL(MatmulGrad, ms_ext::Signature().inputs(3).outputs(2).dtypes(kMatmulTypes)) {
  const at::Tensor &dout = call.input(0), &a = call.input(1), &b = call.input(2);
  if (!a.is_floating_point() && !a.is_complex()) {
    call.output_like(0, a).zero_();
    call.output_like(1, b).zero_();
    return;
  }
  at::AutoGradMode enable_grad(true);
  at::Tensor a_leaf = a.detach().requires_grad_(true), b_leaf = b.detach().requires_grad_(true);
  at::Tensor out = at::matmul(a_leaf, b_leaf);
  auto grads = torch::autograd::grad({out}, {a_leaf, b_leaf}, {dout});
  call.set_output(0, grads[0]);
  call.set_output(1, grads[1]);
}
