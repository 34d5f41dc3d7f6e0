// Matmul on ATen (CPU) with torch.matmul's semantics (1-D, 2-D, batched and broadcast operands), and its backward.
#include <ATen/ops/matmul.h>
#include <torch/csrc/autograd/autograd.h>

#include <ms_ext/ms_ext.h>

namespace {

constexpr ms_ext::DtypeSet kMatmulTypes =
    ms_ext::floating_types() | ms_ext::integral_types() | ms_ext::complex_types();

// torch.matmul's output shape: broadcast batch dimensions, then the rows of `a` (unless a is 1-D) and the columns of
// `b` (unless b is 1-D). Inner dimensions that are known must agree.
std::vector<ms_ext::Shape> matmul_shape(const ms_ext::ShapeArgs &args) {
  if (!args.rank_known(0) || !args.rank_known(1)) return {ms_ext::unknown_rank()};
  const ms_ext::Shape &a = args.shape(0), &b = args.shape(1);
  if (a.empty() || b.empty())
    throw std::invalid_argument("both arguments to matmul need to be at least 1D, but they are " +
                                std::to_string(a.size()) + "D and " + std::to_string(b.size()) + "D");
  const int64_t inner_a = a.back(), inner_b = b.size() >= 2 ? b[b.size() - 2] : b[0];
  if (inner_a != inner_b && inner_a != ms_ext::kUnknownDim && inner_b != ms_ext::kUnknownDim)
    throw std::invalid_argument("shapes " + ms_ext::shape_string(a) + " and " + ms_ext::shape_string(b) +
                                " cannot be multiplied (" + std::to_string(inner_a) + " != " +
                                std::to_string(inner_b) + ")");
  const ms_ext::Shape batch_a(a.begin(), a.end() - std::min<size_t>(a.size(), 2));
  const ms_ext::Shape batch_b(b.begin(), b.end() - std::min<size_t>(b.size(), 2));
  ms_ext::Shape out = ms_ext::broadcast_shapes(batch_a, batch_b);
  if (a.size() >= 2) out.push_back(a[a.size() - 2]);
  if (b.size() >= 2) out.push_back(b.back());
  return {out};
}

}  // namespace

// out = matmul(a, b); both operands must have the same dtype (as in torch).
MS_EXT_KERNEL(Matmul, ms_ext::Signature().inputs(2).outputs(1).dtypes(kMatmulTypes).shapes(matmul_shape)
                          .types(ms_ext::same_type_as_input0)) {
  at::matmul_out(call.output(0), call.input(0), call.input(1));
}

// (da, db) = MatmulGrad(dout, a, b)
//
// matmul's gradient differs for every rank combination (vector-matrix, batched, broadcast batch dims): rather than
// re-deriving those cases, replay the forward under torch autograd and take its vector-Jacobian product.
MS_EXT_KERNEL(MatmulGrad, ms_ext::Signature().inputs(3).outputs(2).dtypes(kMatmulTypes)
                              .shapes(ms_ext::shapes_of_inputs_after_first)
                              .types(ms_ext::types_of_inputs_after_first)) {
  const at::Tensor &dout = call.input(0), &a = call.input(1), &b = call.input(2);
  if (!a.is_floating_point() && !a.is_complex()) {
    call.output(0).zero_();
    call.output(1).zero_();
    return;
  }
  at::AutoGradMode enable_grad(true);
  at::Tensor a_leaf = a.detach().requires_grad_(true), b_leaf = b.detach().requires_grad_(true);
  auto grads = torch::autograd::grad({at::matmul(a_leaf, b_leaf)}, {a_leaf, b_leaf}, {dout});
  call.output(0).copy_(grads[0]);
  call.output(1).copy_(grads[1]);
}
