// ms_ext::Call: one launch of an entry point, with MindSpore's raw arguments decoded into at::Tensor views.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <ms_ext/attrs.h>
#include <ms_ext/c_api.h>
#include <ms_ext/dtypes.h>
#include <ms_ext/detail/raw_args.h>
#include <ms_ext/infer.h>
#include <ms_ext/signature.h>

namespace ms_ext {

// "[2, 3]" for error messages.
inline std::string shape_string(at::IntArrayRef sizes) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < sizes.size(); ++i) os << (i ? ", " : "") << sizes[i];
  os << ']';
  return os.str();
}

class Call {
 public:
  // Decodes and checks the arguments: parameter count, shapes, dtype strings, input dtypes, and (when the
  // signature has rules) output shapes and dtypes. `workspaces` is how many scratch buffers MindSpore passes.
  // `device`: where MindSpore's buffers are (the CPU, or the GPU for kernels built for CUDA).
  // `none_inputs`: whether an input may be None (MindSpore passes NULL and "none"); its input() is then an
  // undefined tensor. Only entry points whose inputs include optional tensors allow it. `state`: the kernel's
  // parsed state, which the shape rules see when they check the output buffers.
  Call(const char *name, const Signature &signature, const detail::RawArgs &raw, const Attrs &attrs, int workspaces,
       at::Device device = at::kCPU, bool none_inputs = false, detail::StateRef state = {})
      : name_(name), signature_(signature), raw_(raw), attrs_(attrs), workspaces_(workspaces), device_(device),
        none_inputs_(none_inputs), state_(state) {
    const int n_in = signature.num_inputs(), n_out = signature.num_outputs();
    if (!detail::parameter_count_fault(raw.nparam).empty())
      throw std::invalid_argument(detail::parameter_count_fault(raw.nparam));
    if (raw.nparam != n_in + n_out + workspaces) {
      std::ostringstream os;
      os << "expected " << n_in << " input(s) and " << n_out << " output(s)";
      if (workspaces) os << " and " << workspaces << " workspace(s)";
      os << " (" << n_in + n_out + workspaces << " parameters), but MindSpore passed " << raw.nparam
         << " parameters; check the number of arguments and out_shape/out_dtype of the Custom operator";
      throw std::invalid_argument(os.str());
    }
    if (raw.params == nullptr) throw std::invalid_argument("MindSpore passed NULL params");
    if (raw.ndims == nullptr) throw std::invalid_argument("MindSpore passed NULL ndims");
    if (raw.dtypes == nullptr) throw std::invalid_argument("MindSpore passed NULL dtypes");
    check_split(n_in, n_out);
    tensors_.reserve(n_in + n_out);
    for (int i = 0; i < n_in + n_out; ++i) tensors_.push_back(view(i));
    for (int i = 0; i < n_in; ++i)
      input_dtypes_.push_back(tensors_[i].defined() ? tensors_[i].scalar_type() : at::ScalarType::Undefined);
    signature.check_input_dtypes(input_dtypes_);
    check_outputs_against_rules();
  }

  const char *name() const { return name_; }
  at::Device device() const { return device_; }
  int num_inputs() const { return signature_.num_inputs(); }
  int num_outputs() const { return signature_.num_outputs(); }
  const Attrs &attrs() const { return attrs_; }

  // Input i as a tensor that aliases MindSpore's buffer (no copy). Writing to it changes the caller's tensor.
  const at::Tensor &input(int i) const { return tensors_.at(check_index(i, num_inputs(), "input")); }

  // Output buffer i. When the signature has shape and dtype rules it was checked against them before the kernel
  // body started; otherwise check it with the overloads below before writing.
  at::Tensor &output(int i) { return tensors_.at(num_inputs() + check_index(i, num_outputs(), "output")); }

  // Output buffer i, after checking that it has exactly the shape and dtype the operator produces. Use it with
  // ATen's *_out overloads, which write straight into MindSpore's buffer. The check comes first because an _out
  // call into a wrongly sized view resizes the view (with only a warning) and leaves MindSpore's buffer with the
  // wrong shape and garbage; check_outputs_intact() after the body is the second line of defence.
  //
  // Compute the expected shape in C++ (at::infer_size for broadcasting, at::native::result_type for promotion)
  // rather than by running the operator on meta tensors: once Python has imported torch, some meta kernels are
  // Python functions (torch/_meta_registrations.py), and the kernel would call into Python from MindSpore's
  // launch thread.
  at::Tensor &output(int i, at::IntArrayRef sizes, at::ScalarType dtype) {
    at::Tensor &out = output(i);
    check_output(i, out, sizes, dtype);
    return out;
  }

  // Output buffer i, checked to have the shape and dtype of `like` (e.g. an elementwise operator's input).
  at::Tensor &output_like(int i, const at::Tensor &like) { return output(i, like.sizes(), like.scalar_type()); }

  // Checks `result` against output i, then copies it into MindSpore's buffer: for operators without an _out
  // overload. Nothing is written when the check fails.
  void set_output(int i, const at::Tensor &result) {
    at::Tensor &out = output(i);
    check_output(i, out, result.sizes(), result.scalar_type());
    out.copy_(result);
  }

  // Scratch buffer i (byte sizes from the signature's scratch rule). MindSpore provides it as a workspace when
  // the size was known at Init; otherwise (a size depending on a dynamic dimension) it is allocated for this call.
  void *scratch(int i) {
    check_index(i, signature_.num_scratch(), "scratch buffer");
    if (i < workspaces_) return raw_.params[num_inputs() + num_outputs() + i];
    if (own_scratch_.empty()) {
      const ShapeArgs shapes(num_inputs(), raw_.ndims, raw_.shapes, attrs_, state_);
      for (int64_t bytes : signature_.scratch_rule()(shapes))
        own_scratch_.push_back(at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device_)));
    }
    return own_scratch_.at(i).data_ptr();
  }
  bool scratch_is_mindspore_workspace(int i) const { return i < workspaces_; }

  // Fails if the kernel body left an output view resized or pointing elsewhere than MindSpore's buffer (an _out
  // call that resized it, or an assignment to it): MindSpore would read its buffer with the declared shape.
  // ATen may resize an output temporarily (matmul_out of a vector does), so only the final state counts.
  void check_outputs_intact() const {
    for (int i = 0; i < num_outputs(); ++i) {
      const int k = num_inputs() + i;
      const at::Tensor &out = tensors_[k];
      const at::IntArrayRef declared(raw_.ndims[k] > 0 ? raw_.shapes[k] : nullptr,
                                     static_cast<size_t>(raw_.ndims[k]));
      if (!out.defined() || out.sizes() != declared || (out.numel() > 0 && out.data_ptr() != raw_.params[k]))
        throw std::logic_error("output " + std::to_string(i) + " no longer views MindSpore's buffer of shape " +
                               shape_string(declared) + " (the kernel resized or replaced it); its data is invalid");
    }
  }

  void *stream() const { return raw_.stream; }
  ms_ext_extra *extra() const { return static_cast<ms_ext_extra *>(raw_.extra); }

 private:
  int check_index(int i, int count, const char *what) const {
    if (i < 0 || i >= count)
      throw std::out_of_range(std::string(what) + " index " + std::to_string(i) + " out of range (" +
                              std::to_string(count) + " in all)");
    return i;
  }

  // MindSpore passes inputs and outputs in one array and does not say where the inputs end, so a primitive called
  // with one input too many and one output too few matches the parameter count and would have the kernel write
  // into the caller's input. The split is therefore taken from the primitive: aot_ops' operators declare it
  // (attribute ms_ext_io = [inputs] or [inputs, outputs]) and check every call's arity in Python; a primitive whose
  // outputs MindSpore infers with the kernel's C++ shape inference has exactly the kernel's outputs. A kernel with
  // several outputs called any other way cannot tell, and refuses. Direct calls (no AotExtra: the harness) are the
  // caller's own arrays.
  void check_split(int n_in, int n_out) const {
    if (raw_.extra == nullptr) return;
    if (attrs_.has("ms_ext_io")) {
      const std::vector<int64_t> io = attrs_.get<std::vector<int64_t>>("ms_ext_io");
      if (io.empty() || io.size() > 2 || io[0] != n_in || (io.size() == 2 && io[1] != n_out))
        throw std::invalid_argument("the primitive was made for a different number of inputs and outputs than this "
                                    "call has (the kernel takes " + std::to_string(n_in) + " input(s) and " +
                                    std::to_string(n_out) + " output(s))");
      return;
    }
    if (signature_.split_known()) return;
    if (n_out > 1 && !(attrs_.has("cpp_infer_shape") && attrs_.get<bool>("cpp_infer_shape")))
      throw std::invalid_argument(
          "the kernel has " + std::to_string(n_out) + " outputs, and MindSpore does not tell a kernel where its "
          "inputs end: call it through an aot_ops operator (AotOp, Library.op), which checks every call, or let "
          "MindSpore infer its outputs with the kernel's C++ shape inference (out_shape=None and a reg_info)");
  }

  std::string describe(int i) const {
    return i < num_inputs() ? "input " + std::to_string(i) : "output " + std::to_string(i - num_inputs());
  }

  at::Tensor view(int i) const {
    const char *dtype = raw_.dtypes[i];
    if (dtype != nullptr && std::strcmp(dtype, "none") == 0) {
      if (none_inputs_ && i < num_inputs()) return at::Tensor();
      throw std::invalid_argument(describe(i) + " is None, but the operator needs a tensor");
    }
    const int nd = raw_.ndims[i];
    if (!detail::rank_fault(nd).empty()) throw std::invalid_argument(describe(i) + " has " + detail::rank_fault(nd));
    if (nd > 0 && (raw_.shapes == nullptr || raw_.shapes[i] == nullptr))
      throw std::invalid_argument(describe(i) + " has rank " + std::to_string(nd) + " but no shape");
    const std::vector<int64_t> sizes(nd > 0 ? raw_.shapes[i] : nullptr, nd > 0 ? raw_.shapes[i] + nd : nullptr);
    for (int64_t s : sizes) {
      if (s < 0)
        throw std::invalid_argument(describe(i) + " has an unresolved dimension in shape " + shape_string(sizes));
    }
    const at::TensorOptions options = at::TensorOptions().dtype(scalar_type_from_ms(dtype)).device(device_);
    int64_t numel = 1;
    for (int64_t s : sizes) numel *= s;
    void *data = raw_.params[i];
    if (numel == 0) {
      // Empty tensors may come without a buffer. A from_blob view of a dummy address (never read: no elements)
      // keeps the storage non-resizable, so an _out call cannot silently allocate a buffer MindSpore never sees.
      alignas(64) static double dummy;
      data = &dummy;
    }
    if (data == nullptr) throw std::invalid_argument(describe(i) + " has no data (NULL buffer)");
    return at::from_blob(data, sizes, options);
  }

  void check_output(int i, const at::Tensor &out, at::IntArrayRef sizes, at::ScalarType type) const {
    if (out.sizes() != sizes || out.scalar_type() != type) {
      throw std::invalid_argument("output " + std::to_string(i) + " has shape " + shape_string(out.sizes()) +
                                  " and dtype " + ms_dtype_name(out.scalar_type()) +
                                  ", but the operator produces shape " + shape_string(sizes) + " and dtype " +
                                  ms_dtype_name(type) + "; check out_shape/out_dtype of the Custom operator");
    }
  }

  // With rules, every output is checked here, before the body: no kernel needs its own output check.
  void check_outputs_against_rules() const {
    if (signature_.shape_rule() == nullptr && signature_.type_rule() == nullptr) return;
    std::vector<Shape> shapes;
    std::vector<at::ScalarType> types;
    if (signature_.shape_rule() != nullptr)
      shapes = signature_.shape_rule()(ShapeArgs(num_inputs(), raw_.ndims, raw_.shapes, attrs_, state_));
    if (signature_.type_rule() != nullptr) types = signature_.type_rule()(TypeArgs(input_dtypes_));
    for (int i = 0; i < num_outputs(); ++i) {
      const at::Tensor &out = tensors_[num_inputs() + i];
      const at::IntArrayRef sizes = i < static_cast<int>(shapes.size()) ? at::IntArrayRef(shapes[i]) : out.sizes();
      const at::ScalarType type = i < static_cast<int>(types.size()) ? types[i] : out.scalar_type();
      check_output(i, out, sizes, type);
    }
  }

  const char *name_;
  const Signature &signature_;
  detail::RawArgs raw_;
  const Attrs &attrs_;
  int workspaces_;
  at::Device device_;
  bool none_inputs_;
  detail::StateRef state_;
  std::vector<at::Tensor> tensors_;
  std::vector<at::ScalarType> input_dtypes_;
  std::vector<at::Tensor> own_scratch_;
};

}  // namespace ms_ext
