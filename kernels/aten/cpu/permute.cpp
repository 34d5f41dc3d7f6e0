// Permute on ATen (CPU): the output is x.permute(dims) laid out contiguously (int list attribute `dims`). Its
// backward is Permute with the inverse permutation (aot_ops builds that operator).
#include <ms_ext/ms_ext.h>

namespace {

struct Dims {
  std::vector<int64_t> value;
  explicit Dims(const ms_ext::Attrs &attrs) : value(attrs.get<std::vector<int64_t>>("dims")) {}

  // The permutation wrapped for a tensor of `rank` dimensions; it must name every dimension once.
  std::vector<int64_t> wrapped(int64_t rank) const {
    if (static_cast<int64_t>(value.size()) != rank)
      throw std::invalid_argument("number of dims don't match in permute: input has " + std::to_string(rank) +
                                  " dimensions, dims has " + std::to_string(value.size()));
    std::vector<int64_t> out;
    std::vector<bool> seen(rank, false);
    for (int64_t d : value) {
      const int64_t w = ms_ext::wrap_dim(d, rank);
      if (rank > 0 && seen[w]) throw std::invalid_argument("repeated dim " + std::to_string(w) + " in permute");
      if (rank > 0) seen[w] = true;
      out.push_back(w);
    }
    return out;
  }
};

std::vector<ms_ext::Shape> permute_shape(const ms_ext::ShapeArgs &args) {
  const auto &dims = args.state<Dims>();
  if (!args.rank_known(0)) return {ms_ext::Shape(dims.value.size(), ms_ext::kUnknownDim)};
  const ms_ext::Shape &in = args.shape(0);
  ms_ext::Shape out;
  for (int64_t d : dims.wrapped(in.size())) out.push_back(in[d]);
  return {out};
}

}  // namespace

// y = x.permute(dims).contiguous(); every dtype
MS_EXT_KERNEL_WITH_STATE(Permute, Dims, ms_ext::Signature().inputs(1).outputs(1).attr<std::vector<int64_t>>("dims")
                                            .shapes(permute_shape)
                                            .types(ms_ext::same_type_as_input0)) {
  const at::Tensor &x = call.input(0);
  call.output(0).copy_(x.permute(state.wrapped(x.dim())));
}
