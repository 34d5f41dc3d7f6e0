// Reductions on ATen (CPU) and their backwards:
//   Sum      sum of all elements (a 0-dim result)
//   SumDims  sum over `dim` (int list; empty = all) with `keepdim` (bool)
//   MeanDims mean over `dim` with `keepdim`
//   MaxDim   max over `dim` (int, default -1) with `keepdim`: values and int64 indices
#include <ATen/ops/div.h>
#include <ATen/ops/max.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/value_selecting_reduction_backward.h>

#include <algorithm>

#include <ms_ext/ms_ext.h>

namespace {

// The dtypes ATen's CPU kernels handle: max has no complex or wide-unsigned kernel, sum handles everything, mean
// only floating and complex.
constexpr ms_ext::DtypeSet kMaxTypes = ms_ext::floating_types() | ms_ext::integral_types() | ms_ext::bool_type();
constexpr ms_ext::DtypeSet kSumTypes = kMaxTypes | ms_ext::complex_types() | ms_ext::barebones_unsigned_types();
constexpr ms_ext::DtypeSet kMeanTypes = ms_ext::floating_types() | ms_ext::complex_types();

bool differentiable(at::ScalarType t) { return at::isFloatingType(t) || at::isComplexType(t); }

// torch.sum accumulates integers and bool in int64.
at::ScalarType sum_type(at::ScalarType t) { return at::isIntegralType(t, /*includeBool=*/true) ? at::kLong : t; }

struct Reduce {
  std::vector<int64_t> dims;  // empty: every dimension
  bool keepdim;
  explicit Reduce(const ms_ext::Attrs &attrs)
      : dims(attrs.get<std::vector<int64_t>>("dim", {})), keepdim(attrs.get<bool>("keepdim", false)) {}

  // Which dimensions of a rank-`rank` tensor are reduced (torch's rules: wrapped, no repeats).
  std::vector<bool> reduced(int64_t rank) const {
    std::vector<bool> mask(rank, dims.empty());
    for (int64_t d : dims) {
      const int64_t w = ms_ext::wrap_dim(d, rank);
      if (rank == 0) continue;
      if (mask[w] && !dims.empty())
        throw std::invalid_argument("dim " + std::to_string(w) + " appears multiple times in the list of dims");
      mask[w] = true;
    }
    return mask;
  }

  ms_ext::Shape shape(const ms_ext::ShapeArgs &args, int input) const {
    if (!args.rank_known(input)) return ms_ext::unknown_rank();
    const ms_ext::Shape &in = args.shape(input);
    const std::vector<bool> mask = reduced(in.size());
    ms_ext::Shape out;
    for (size_t i = 0; i < in.size(); ++i) {
      if (!mask[i]) out.push_back(in[i]);
      else if (keepdim) out.push_back(1);
    }
    return out;
  }

  // The incoming gradient, shaped to broadcast against the input (reduced dimensions put back as size 1).
  at::Tensor unsqueezed(const at::Tensor &grad, int64_t input_rank) const {
    if (keepdim || input_rank == 0) return grad;
    const std::vector<bool> mask = reduced(input_rank);
    at::Tensor g = grad;
    for (int64_t i = 0; i < input_rank; ++i)
      if (mask[i]) g = g.unsqueeze(i);
    return g;
  }

  int64_t count(at::IntArrayRef sizes) const {
    const std::vector<bool> mask = reduced(sizes.size());
    int64_t n = 1;
    for (size_t i = 0; i < sizes.size(); ++i)
      if (mask[i]) n *= sizes[i];
    return n;
  }
};

struct ReduceOne {
  int64_t dim;
  bool keepdim;
  explicit ReduceOne(const ms_ext::Attrs &attrs)
      : dim(attrs.get<int64_t>("dim", -1)), keepdim(attrs.get<bool>("keepdim", false)) {}
};

std::vector<ms_ext::Shape> scalar_shape(const ms_ext::ShapeArgs &) { return {{}}; }
std::vector<at::ScalarType> sum_types(const ms_ext::TypeArgs &args) { return {sum_type(args.dtype(0))}; }
std::vector<ms_ext::Shape> reduce_shape(const ms_ext::ShapeArgs &args) {
  return {args.state<Reduce>().shape(args, 0)};
}

std::vector<ms_ext::Shape> max_shapes(const ms_ext::ShapeArgs &args) {
  const auto &r = args.state<ReduceOne>();
  if (!args.rank_known(0)) return {ms_ext::unknown_rank(), ms_ext::unknown_rank()};
  ms_ext::Shape out = args.shape(0);
  if (!out.empty()) {
    const int64_t d = ms_ext::wrap_dim(r.dim, out.size());
    if (r.keepdim) out[d] = 1;
    else out.erase(out.begin() + d);
  }
  return {out, out};
}
std::vector<at::ScalarType> max_types(const ms_ext::TypeArgs &args) { return {args.dtype(0), at::kLong}; }

// The input x (input 1 of a backward kernel) is what the gradient is shaped like.
std::vector<ms_ext::Shape> shape_of_input1(const ms_ext::ShapeArgs &args) { return {args.shape(1)}; }
std::vector<at::ScalarType> type_of_input1(const ms_ext::TypeArgs &args) { return {args.dtype(1)}; }

}  // namespace

// out = x.sum() as a 0-dim tensor
MS_EXT_KERNEL(Sum, ms_ext::Signature().inputs(1).outputs(1).dtypes(kSumTypes).shapes(scalar_shape).types(sum_types)) {
  at::Tensor &out = call.output(0);
  at::sum_out(out, call.input(0), at::IntArrayRef{}, /*keepdim=*/false, out.scalar_type());
}

// dx = SumGrad(dout, x): dout broadcast to x's shape.
MS_EXT_KERNEL(SumGrad, ms_ext::Signature().inputs(2).outputs(1).dtypes(kSumTypes).shapes(shape_of_input1)
                           .types(type_of_input1)) {
  const at::Tensor &dout = call.input(0), &x = call.input(1);
  if (differentiable(x.scalar_type())) call.output(0).copy_(dout.expand(x.sizes()));
  else call.output(0).zero_();
}

// out = x.sum(dim, keepdim)
MS_EXT_KERNEL_WITH_STATE(SumDims, Reduce, ms_ext::Signature().inputs(1).outputs(1).dtypes(kSumTypes)
                                              .attr<std::vector<int64_t>>("dim").attr<bool>("keepdim")
                                              .shapes(reduce_shape).types(sum_types)) {
  at::Tensor &out = call.output(0);
  at::sum_out(out, call.input(0), state.dims, state.keepdim, out.scalar_type());
}

// dx = SumDimsGrad(dout, x)
MS_EXT_KERNEL_WITH_STATE(SumDimsGrad, Reduce, ms_ext::Signature().inputs(2).outputs(1).dtypes(kSumTypes)
                                              .attr<std::vector<int64_t>>("dim").attr<bool>("keepdim")
                                                  .shapes(shape_of_input1).types(type_of_input1)) {
  const at::Tensor &dout = call.input(0), &x = call.input(1);
  if (differentiable(x.scalar_type())) call.output(0).copy_(state.unsqueezed(dout, x.dim()).expand(x.sizes()));
  else call.output(0).zero_();
}

// out = x.mean(dim, keepdim)
MS_EXT_KERNEL_WITH_STATE(MeanDims, Reduce, ms_ext::Signature().inputs(1).outputs(1).dtypes(kMeanTypes)
                                              .attr<std::vector<int64_t>>("dim").attr<bool>("keepdim")
                                               .shapes(reduce_shape).types(ms_ext::same_type_as_input0)) {
  at::mean_out(call.output(0), call.input(0), state.dims, state.keepdim);
}

// dx = MeanDimsGrad(dout, x)
MS_EXT_KERNEL_WITH_STATE(MeanDimsGrad, Reduce, ms_ext::Signature().inputs(2).outputs(1).dtypes(kMeanTypes)
                                              .attr<std::vector<int64_t>>("dim").attr<bool>("keepdim")
                                                   .shapes(shape_of_input1).types(type_of_input1)) {
  const at::Tensor &dout = call.input(0), &x = call.input(1);
  const int64_t n = state.count(x.sizes());
  call.output(0).copy_(at::div(state.unsqueezed(dout, x.dim()).expand(x.sizes()), n == 0 ? 1 : n));
}

// (values, indices) = torch.max(x, dim, keepdim)
MS_EXT_KERNEL_WITH_STATE(MaxDim, ReduceOne, ms_ext::Signature().inputs(1).outputs(2).dtypes(kMaxTypes)
                                                .attr<int64_t>("dim").attr<bool>("keepdim")
                                                .shapes(max_shapes).types(max_types)) {
  at::max_out(call.output(0), call.output(1), call.input(0), state.dim, state.keepdim);
}

// dx = MaxDimGrad(dvalues, x, indices): dvalues scattered to the selected positions, zero elsewhere.
MS_EXT_KERNEL_WITH_STATE(MaxDimGrad, ReduceOne, ms_ext::Signature().inputs(3).outputs(1).dtypes(kMaxTypes)
                                                .attr<int64_t>("dim").attr<bool>("keepdim")
                                                    .shapes(shape_of_input1).types(type_of_input1)) {
  const at::Tensor &dvalues = call.input(0), &x = call.input(1), &indices = call.input(2);
  if (indices.scalar_type() != at::kLong)
    throw std::invalid_argument(std::string("input 2 (indices) must be int64, got ") +
                                ms_ext::ms_dtype_name(indices.scalar_type()));
  if (!at::isFloatingType(x.scalar_type())) {
    call.output(0).zero_();
    return;
  }
  call.output(0).copy_(at::value_selecting_reduction_backward_symint(
      dvalues, state.dim, indices, c10::fromIntArrayRefSlow(x.sizes()), state.keepdim));
}
