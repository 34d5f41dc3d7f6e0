// Layer normalisation on ATen (CPU): torch's native_layer_norm, with attributes `normalized_shape` (int list) and
// `eps` (float, default 1e-5). Three outputs as in torch: y, and the mean and reciprocal standard deviation the
// backward needs (aot_ops shows users y only).
#include <ATen/ops/native_layer_norm.h>
#include <ATen/ops/native_layer_norm_backward.h>

#include <ms_ext/ms_ext.h>

namespace {

struct LayerNormAttrs {
  std::vector<int64_t> normalized_shape;
  double eps;
  explicit LayerNormAttrs(const ms_ext::Attrs &attrs)
      : normalized_shape(attrs.get<std::vector<int64_t>>("normalized_shape")), eps(attrs.get<double>("eps", 1e-5)) {
    if (normalized_shape.empty())
      throw std::invalid_argument("attribute 'normalized_shape' must name at least one dimension");
  }
};

// y has x's shape; mean and rstd keep the leading dimensions and have size 1 in the normalised ones.
std::vector<ms_ext::Shape> layer_norm_shapes(const ms_ext::ShapeArgs &args) {
  const auto &attrs = args.state<LayerNormAttrs>();
  if (!args.rank_known(0)) return {ms_ext::unknown_rank(), ms_ext::unknown_rank(), ms_ext::unknown_rank()};
  const ms_ext::Shape &x = args.shape(0);
  const size_t k = attrs.normalized_shape.size();
  if (x.size() < k)
    throw std::invalid_argument("input of rank " + std::to_string(x.size()) + " cannot be normalised over " +
                                std::to_string(k) + " dimensions");
  ms_ext::Shape stats(x.begin(), x.end() - k);
  stats.insert(stats.end(), k, 1);
  return {x, stats, stats};
}

std::vector<at::ScalarType> layer_norm_types(const ms_ext::TypeArgs &args) {
  return {args.dtype(0), args.dtype(0), args.dtype(0)};
}

// LayerNormGrad(dy, x, mean, rstd, weight, bias) -> (dx, dweight, dbias)
std::vector<ms_ext::Shape> layer_norm_grad_shapes(const ms_ext::ShapeArgs &args) {
  return {args.shape(1), args.shape(4), args.shape(5)};
}
std::vector<at::ScalarType> layer_norm_grad_types(const ms_ext::TypeArgs &args) {
  return {args.dtype(1), args.dtype(4), args.dtype(5)};
}

}  // namespace

// (y, mean, rstd) = native_layer_norm(x, normalized_shape, weight, bias, eps)
MS_EXT_KERNEL_WITH_STATE(LayerNorm, LayerNormAttrs,
                         ms_ext::Signature().inputs(3).outputs(3).dtypes(ms_ext::floating_types())
                             .attr<std::vector<int64_t>>("normalized_shape").attr<double>("eps")
                             .shapes(layer_norm_shapes).types(layer_norm_types)) {
  at::native_layer_norm_out(call.output(0), call.output(1), call.output(2), call.input(0), state.normalized_shape,
                            call.input(1), call.input(2), state.eps);
}

MS_EXT_KERNEL_WITH_STATE(LayerNormGrad, LayerNormAttrs,
                         ms_ext::Signature().inputs(6).outputs(3).dtypes(ms_ext::floating_types())
                             .attr<std::vector<int64_t>>("normalized_shape").attr<double>("eps")
                             .shapes(layer_norm_grad_shapes).types(layer_norm_grad_types)) {
  at::native_layer_norm_backward_out(call.output(0), call.output(1), call.output(2), call.input(0), call.input(1),
                                     state.normalized_shape, call.input(2), call.input(3), call.input(4),
                                     call.input(5), {true, true, true});
}
