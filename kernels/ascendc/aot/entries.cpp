// MindSpore aot entry points of the Ascend C operators: AddCustom, LeakyReluCustom, SoftmaxCustom.
// Attributes: block_dim (int, default 8: how many cores the kernel is launched on); LeakyReluCustom also reads
// negative_slope (float, default 0.01).
#include <ms_ext/ms_ext.h>

#include <stdexcept>

#include "operators.h"

namespace {

struct Launch {
  int64_t block_dim;
  explicit Launch(const ms_ext::Attrs &attrs) : block_dim(attrs.get<int64_t>("block_dim", ascendc_aot::kDefaultBlockDim)) {}
};

struct LeakyReluLaunch : Launch {
  double negative_slope;
  explicit LeakyReluLaunch(const ms_ext::Attrs &attrs)
      : Launch(attrs), negative_slope(attrs.get<double>("negative_slope", 0.01)) {}
};

// x and y of the same shape (no broadcasting: the kernel adds element by element). Unknown dimensions (-1) of
// GRAPH_MODE's dynamic shapes take the other operand's size.
std::vector<ms_ext::Shape> same_shapes(const ms_ext::ShapeArgs &args) {
  const ms_ext::Shape &a = args.shape(0), &b = args.shape(1);
  if (!args.rank_known(0)) return {b};
  if (!args.rank_known(1)) return {a};
  if (a.size() != b.size()) throw std::invalid_argument("x and y must have the same shape (no broadcasting)");
  ms_ext::Shape out(a);
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == ms_ext::kUnknownDim) {
      out[i] = b[i];
    } else if (b[i] != ms_ext::kUnknownDim && a[i] != b[i]) {
      throw std::invalid_argument("x and y must have the same shape (no broadcasting)");
    }
  }
  return {out};
}

std::vector<at::ScalarType> one_dtype(const ms_ext::TypeArgs &args) {
  if (args.dtype(0) != args.dtype(1)) throw std::invalid_argument("x and y must have the same dtype");
  return {args.dtype(0)};
}

}  // namespace

// z = AddCustom(x, y)
MS_EXT_KERNEL_WITH_STATE(AddCustom, Launch,
                         ms_ext::Signature().inputs(2).outputs(1).dtypes(ms_ext::floating_types())
                             .attr<int64_t>("block_dim")
                             .shapes(same_shapes).types(one_dtype)) {
  ascendc_aot::add_custom(call.input(0), call.input(1), call.output(0), state.block_dim);
}

// y = LeakyReluCustom(x)
MS_EXT_KERNEL_WITH_STATE(LeakyReluCustom, LeakyReluLaunch,
                         ms_ext::Signature().inputs(1).outputs(1).dtypes(ms_ext::floating_types())
                             .attr<int64_t>("block_dim").attr<double>("negative_slope")
                             .shapes(ms_ext::same_shape_as_input0).types(ms_ext::same_type_as_input0)) {
  ascendc_aot::leaky_relu_custom(call.input(0), call.output(0), state.negative_slope, state.block_dim);
}

// y = SoftmaxCustom(x), over the last dimension
MS_EXT_KERNEL_WITH_STATE(SoftmaxCustom, Launch,
                         ms_ext::Signature().inputs(1).outputs(1).dtypes(ms_ext::floating_types())
                             .attr<int64_t>("block_dim")
                             .shapes(ms_ext::same_shape_as_input0).types(ms_ext::same_type_as_input0)) {
  if (call.input(0).dim() == 0) throw std::invalid_argument("softmax over the last dimension needs rank >= 1");
  ascendc_aot::softmax_custom(call.input(0), call.output(0), state.block_dim);
}
