// A user's own aot source, as `python -m aot_ops build` compiles it. Used by the tests.
#include <ATen/Parallel.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/tensor.h>

#include <atomic>

#include <ms_ext/ms_ext.h>

// out = x * 2 (any dtype torch can multiply)
MS_EXT_KERNEL(Double, ms_ext::Signature().inputs(1).outputs(1)) {
  const at::Tensor &x = call.input(0);
  const at::Tensor result = at::mul(x, 2);
  call.set_output(0, result);
}

// out = x, byte for byte: shows each dtype string maps to a type of the right size.
MS_EXT_KERNEL(Identity, ms_ext::Signature().inputs(1).outputs(1)) {
  call.output_like(0, call.input(0)).copy_(call.input(0));
}

// out = x filled with torch's intra-op thread count as the kernel sees it (on whichever thread MindSpore launches).
MS_EXT_KERNEL(TorchThreads, ms_ext::Signature().inputs(1).outputs(1).shapes(ms_ext::same_shape_as_input0)
                                .types(ms_ext::same_type_as_input0)) {
  call.output_like(0, call.input(0)).fill_(static_cast<double>(at::get_num_threads()));
}

// Throws something that is not a std::exception. Without ms_ext's boundary this aborts MindSpore's process.
MS_EXT_KERNEL(ThrowsInt, ms_ext::Signature().inputs(1).outputs(1)) {
  throw 42;
}

// The same throw with no ms_ext boundary: what a hand-written entry point does.
extern "C" int ThrowsIntUnguarded(int, void **, int *, int64_t **, const char **, void *, void *) { throw 42; }

// Shrinks its output view instead of filling it: ms_ext must refuse to return such a result.
MS_EXT_KERNEL(ShrinksOutput, ms_ext::Signature().inputs(1).outputs(1)) {
  call.output(0).resize_({1});
}

// Increments its input in place (and returns the new value): proves input views alias the caller's buffer.
MS_EXT_KERNEL(IncrementInput, ms_ext::Signature().inputs(1).outputs(1)) {
  at::Tensor x = call.input(0);
  x.add_(1);
  call.output_like(0, x).copy_(x);
}

// ---- attributes -------------------------------------------------------------------------------------------------

// Reads one attribute of each of the eight kinds MindSpore supports and writes them, flattened, into a float64
// vector: [b, i, f, len(s), chars of s..., len(il), il..., len(fl), fl..., rows(i2), (len(row), row...)...,
//          rows(f2), (len(row), row...)...]. Every attribute is required.
struct AllKinds {
  bool b;
  int64_t i;
  double f;
  std::string s;
  std::vector<int64_t> il;
  std::vector<double> fl;
  std::vector<std::vector<int64_t>> i2;
  std::vector<std::vector<float>> f2;
  explicit AllKinds(const ms_ext::Attrs &a)
      : b(a.get<bool>("b")), i(a.get<int64_t>("i")), f(a.get<double>("f")), s(a.get<std::string>("s")),
        il(a.get<std::vector<int64_t>>("il")), fl(a.get<std::vector<double>>("fl")),
        i2(a.get<std::vector<std::vector<int64_t>>>("i2")), f2(a.get<std::vector<std::vector<float>>>("f2")) {}

  std::vector<double> flattened() const {
    std::vector<double> out{double(b), double(i), f, double(s.size())};
    for (char c : s) out.push_back(double(static_cast<unsigned char>(c)));
    out.push_back(double(il.size()));
    out.insert(out.end(), il.begin(), il.end());
    out.push_back(double(fl.size()));
    out.insert(out.end(), fl.begin(), fl.end());
    out.push_back(double(i2.size()));
    for (const auto &row : i2) {
      out.push_back(double(row.size()));
      out.insert(out.end(), row.begin(), row.end());
    }
    out.push_back(double(f2.size()));
    for (const auto &row : f2) {
      out.push_back(double(row.size()));
      out.insert(out.end(), row.begin(), row.end());
    }
    return out;
  }
};

std::vector<ms_ext::Shape> echo_shape(const ms_ext::ShapeArgs &args) {
  return {{static_cast<int64_t>(args.state<AllKinds>().flattened().size())}};
}
std::vector<at::ScalarType> echo_type(const ms_ext::TypeArgs &) { return {at::kDouble}; }

MS_EXT_KERNEL_WITH_STATE(AttrEcho, AllKinds,
                         ms_ext::Signature().inputs(1).outputs(1).shapes(echo_shape).types(echo_type)
                             .attr<bool>("b").attr<int64_t>("i").attr<double>("f").attr<std::string>("s")
                             .attr<std::vector<int64_t>>("il").attr<std::vector<double>>("fl")
                             .attr<std::vector<std::vector<int64_t>>>("i2")
                             .attr<std::vector<std::vector<float>>>("f2")) {
  const std::vector<double> values = state.flattened();
  call.output(0).copy_(at::tensor(values, at::kDouble));
}

// The same eight kinds read from a packed attribute table (one string attribute, ms_ext::Attrs::unpack).
struct PackedKinds : AllKinds {
  explicit PackedKinds(const ms_ext::Attrs &a) : AllKinds(ms_ext::Attrs::unpack(a.get<std::string>("packed"))) {}
};

std::vector<ms_ext::Shape> packed_echo_shape(const ms_ext::ShapeArgs &args) {
  return {{static_cast<int64_t>(args.state<PackedKinds>().flattened().size())}};
}

MS_EXT_KERNEL_WITH_STATE(PackedAttrEcho, PackedKinds,
                         ms_ext::Signature().inputs(1).outputs(1).shapes(packed_echo_shape).types(echo_type)
                             .attr<std::string>("packed")) {
  const std::vector<double> values = state.flattened();
  call.output(0).copy_(at::tensor(values, at::kDouble));
}

// A state whose constructor throws an exception with an empty message (MindSpore shows nothing for Init errors,
// so ms_ext must still say that Init failed, and never run the body on a missing state).
struct ThrowsEmpty {
  explicit ThrowsEmpty(const ms_ext::Attrs &) { throw std::runtime_error(""); }
};

MS_EXT_KERNEL_WITH_STATE(EmptyInitError, ThrowsEmpty,
                         ms_ext::Signature().inputs(1).outputs(1).shapes(ms_ext::same_shape_as_input0)
                             .types(ms_ext::same_type_as_input0)) {
  call.output(0).copy_(call.input(0));
}

// A kernel whose state reads an attribute its Signature does not declare: the author's mistake, reported by name.
struct ReadsScale {
  double scale;
  explicit ReadsScale(const ms_ext::Attrs &attrs) : scale(attrs.get<double>("scale", 1.0)) {}
};

MS_EXT_KERNEL_WITH_STATE(ReadsUndeclared, ReadsScale,
                         ms_ext::Signature().inputs(1).outputs(1).attr<double>("factor")
                             .shapes(ms_ext::same_shape_as_input0).types(ms_ext::same_type_as_input0)) {
  at::mul_out(call.output(0), call.input(0), at::scalar_tensor(state.scale, call.input(0).options()));
}

// A kernel with state that declares no attributes: reads are not checked (kernels written before declarations).
MS_EXT_KERNEL_WITH_STATE(ScaleUndeclared, ReadsScale,
                         ms_ext::Signature().inputs(1).outputs(1)
                             .shapes(ms_ext::same_shape_as_input0).types(ms_ext::same_type_as_input0)) {
  at::mul_out(call.output(0), call.input(0), at::scalar_tensor(state.scale, call.input(0).options()));
}

// A state that counts how often it is parsed (user_ops_state_parses): a launch uses the state its Init parsed, and
// the shape rule, which checks the output buffer at every launch, reads that state instead of parsing it again.
std::atomic<int64_t> g_state_parses{0};
struct CountedScale {
  double scale;
  explicit CountedScale(const ms_ext::Attrs &attrs) : scale(attrs.get<double>("scale")) { ++g_state_parses; }
};
std::vector<ms_ext::Shape> counted_shape(const ms_ext::ShapeArgs &args) {
  if (args.state<CountedScale>().scale < 0) throw std::invalid_argument("scale must not be negative");
  return {args.shape(0)};
}

MS_EXT_KERNEL_WITH_STATE(CountedScaleOp, CountedScale,
                         ms_ext::Signature().inputs(1).outputs(1).attr<double>("scale")
                             .shapes(counted_shape).types(ms_ext::same_type_as_input0)) {
  at::mul_out(call.output(0), call.input(0), at::scalar_tensor(state.scale, call.input(0).options()));
}

extern "C" MS_EXT_EXPORT int64_t user_ops_state_parses(void) { return g_state_parses.load(); }

// ---- scratch buffers --------------------------------------------------------------------------------------------

// Row sums of a float32 matrix computed through a scratch copy of it; output 1 says where the scratch came from
// (1: a MindSpore workspace, sized at Init; 0: allocated per call, because a dimension was unknown at Init).
std::vector<int64_t> scratch_bytes(const ms_ext::ShapeArgs &args) {
  const ms_ext::Shape &x = args.shape(0);
  if (!args.rank_known(0) || x.size() != 2 || x[0] < 0 || x[1] < 0) return {ms_ext::kUnknownDim};
  return {x[0] * x[1] * static_cast<int64_t>(sizeof(float))};
}
std::vector<ms_ext::Shape> row_sums_shapes(const ms_ext::ShapeArgs &args) {
  if (args.rank(0) != 2) throw std::invalid_argument("expected a matrix");
  return {{args.shape(0)[0]}, {}};
}
std::vector<at::ScalarType> row_sums_types(const ms_ext::TypeArgs &) { return {at::kFloat, at::kLong}; }

MS_EXT_KERNEL(RowSumsWithScratch, ms_ext::Signature().inputs(1).outputs(2).dtypes({at::kFloat})
                                      .shapes(row_sums_shapes).types(row_sums_types).scratch(1, scratch_bytes)) {
  const at::Tensor &x = call.input(0);
  at::Tensor copy = at::from_blob(call.scratch(0), x.sizes(), x.options());
  copy.copy_(x);
  at::sum_out(call.output(0), copy, {1});
  call.output(1).fill_(call.scratch_is_mindspore_workspace(0) ? 1 : 0);
}
