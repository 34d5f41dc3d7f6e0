// Any ATen operator, called by schema name through the c10 dispatcher's boxed API: one precompiled entry point
// (AtenOp) and its generic backward (AtenOpBackward).
//
// aot_ops binds a call to the operator's schema in Python and sends the result as attributes:
//   aten_op           "aten::add.Tensor"          the functional overload
//   aten_out_op       "aten::add.out" or ""        its out= overload with the same arguments, when one exists
//   aten_num_inputs   int                          how many tensors MindSpore passes as inputs
//   aten_kinds        int list                     one ArgKind per schema argument, in schema order
//   aten_arg_<i>      value of argument i          (absent for tensors' None and for NONE)
// The kinds and their encodings must match aot_ops/_aten/encode.py.
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros_like.h>
#include <torch/csrc/autograd/autograd.h>

#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include <ms_ext/ms_ext.h>

namespace {

enum class ArgKind : int64_t {
  Tensor = 0,          // value: input index
  None = 1,
  Bool = 2,
  Int = 3,
  Float = 4,           // value: str (Python repr: MindSpore stores float attributes as float32)
  Str = 5,
  IntList = 6,
  FloatList = 7,       // value: str, comma-separated reprs
  BoolList = 8,        // value: int list of 0/1
  ScalarInt = 9,
  ScalarFloat = 10,    // value: str repr
  ScalarBool = 11,
  Dtype = 12,          // value: MindSpore dtype name ("float32")
  TensorList = 13,     // value: int list of input indices
  OptionalTensorList = 14,  // value: int list of input indices, -1 for None
  WrappedInt = 15,     // a Python number given for a Tensor argument (torch's "wrapped number")
  WrappedFloat = 16,   // value: str repr
  WrappedBool = 17,
};

// A 0-dim CPU tensor marked as a wrapped number: it promotes like a Python scalar (x_f16 * 2.0 stays float16).
at::Tensor wrapped_number(const at::Scalar &value) {
  at::Tensor t = at::scalar_tensor(value, at::TensorOptions().dtype(value.type()));
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

double parse_double(const std::string &text) {
  size_t used = 0;
  const double value = std::stod(text, &used);
  if (used != text.size()) throw std::invalid_argument("not a number: '" + text + "'");
  return value;
}

std::vector<double> parse_doubles(const std::string &text) {
  std::vector<double> out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t comma = text.find(',', start);
    out.push_back(parse_double(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// One schema argument's value, decoded from the attributes once (when MindSpore initialises the kernel).
struct Arg {
  ArgKind kind;
  c10::IValue constant;            // every non-tensor kind
  std::vector<int64_t> inputs;     // Tensor, TensorList, OptionalTensorList: input indices
};

c10::OperatorHandle find_operator(const std::string &qualified) {
  const size_t dot = qualified.find('.', qualified.find("::"));
  const std::string name = qualified.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : qualified.substr(dot + 1);
  return c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
}

// The parsed call: which operator, and how to build its argument stack from MindSpore's inputs.
struct AtenPlan {
  std::string name;
  std::optional<c10::OperatorHandle> op;
  std::optional<c10::OperatorHandle> out_op;
  int num_inputs = 0;
  std::vector<Arg> args;
  // Some out= kernels write intermediate results into `out` at another shape (mse_loss.out computes the
  // elementwise loss in it before reducing). Into MindSpore's fixed-size buffer that fails at the resize, before
  // anything is written; the plan then uses the functional overload from that call on.
  mutable std::atomic<bool> out_op_resizes{false};

  explicit AtenPlan(const ms_ext::Attrs &attrs) : name(attrs.get<std::string>("aten_op")) {
    op = find_operator(name);
    const std::string out_name = attrs.get<std::string>("aten_out_op", "");
    if (!out_name.empty()) out_op = find_operator(out_name);
    num_inputs = static_cast<int>(attrs.get<int64_t>("aten_num_inputs"));
    const std::vector<int64_t> kinds = attrs.get<std::vector<int64_t>>("aten_kinds");
    if (kinds.size() != op->schema().arguments().size())
      throw std::invalid_argument(name + " takes " + std::to_string(op->schema().arguments().size()) +
                                  " arguments, the attributes describe " + std::to_string(kinds.size()));
    for (size_t i = 0; i < kinds.size(); ++i) args.push_back(decode(attrs, i, static_cast<ArgKind>(kinds[i])));
  }

  static Arg decode(const ms_ext::Attrs &attrs, size_t i, ArgKind kind) {
    const std::string key = "aten_arg_" + std::to_string(i);
    const char *k = key.c_str();
    Arg arg{kind, c10::IValue(), {}};
    switch (kind) {
      case ArgKind::Tensor: arg.inputs = {attrs.get<int64_t>(k)}; break;
      case ArgKind::TensorList:
      case ArgKind::OptionalTensorList: arg.inputs = attrs.get<std::vector<int64_t>>(k); break;
      case ArgKind::None: break;
      case ArgKind::Bool: arg.constant = attrs.get<bool>(k); break;
      case ArgKind::Int: arg.constant = attrs.get<int64_t>(k); break;
      case ArgKind::Float: arg.constant = parse_double(attrs.get<std::string>(k)); break;
      case ArgKind::Str: arg.constant = attrs.get<std::string>(k); break;
      case ArgKind::IntList: arg.constant = attrs.get<std::vector<int64_t>>(k); break;
      case ArgKind::FloatList: arg.constant = parse_doubles(attrs.get<std::string>(k)); break;
      case ArgKind::BoolList: {
        c10::List<bool> values;
        for (int64_t v : attrs.get<std::vector<int64_t>>(k)) values.push_back(v != 0);
        arg.constant = values;
        break;
      }
      case ArgKind::ScalarInt: arg.constant = at::Scalar(attrs.get<int64_t>(k)); break;
      case ArgKind::ScalarFloat: arg.constant = at::Scalar(parse_double(attrs.get<std::string>(k))); break;
      case ArgKind::ScalarBool: arg.constant = at::Scalar(attrs.get<bool>(k)); break;
      case ArgKind::Dtype: arg.constant = ms_ext::scalar_type_from_ms(attrs.get<std::string>(k).c_str()); break;
      case ArgKind::WrappedInt: arg.constant = wrapped_number(attrs.get<int64_t>(k)); break;
      case ArgKind::WrappedFloat: arg.constant = wrapped_number(parse_double(attrs.get<std::string>(k))); break;
      case ArgKind::WrappedBool: arg.constant = wrapped_number(attrs.get<bool>(k)); break;
      default: throw std::invalid_argument("argument " + std::to_string(i) + " has an unknown kind");
    }
    return arg;
  }

  // Marks the inputs of schema argument `name` as not differentiable; false if it has no input to mark.
  bool mark_not_differentiable(const std::string &name, std::vector<bool> &differentiable) const {
    const auto &arguments = op->schema().arguments();
    bool marked = false;
    for (size_t a = 0; a < arguments.size(); ++a) {
      if (arguments[a].name() != name) continue;
      for (int64_t i : args[a].inputs) {
        if (i >= 0 && differentiable.at(i)) {
          differentiable[i] = false;
          marked = true;
        }
      }
    }
    return marked;
  }

  // The argument stack for the functional operator, with `tensor(i)` giving input i.
  template <typename TensorOf>
  torch::jit::Stack stack(TensorOf tensor) const {
    torch::jit::Stack s;
    s.reserve(args.size());
    for (const Arg &arg : args) {
      switch (arg.kind) {
        case ArgKind::Tensor: s.emplace_back(tensor(arg.inputs[0])); break;
        case ArgKind::TensorList: {
          c10::List<at::Tensor> list;
          for (int64_t i : arg.inputs) list.push_back(tensor(i));
          s.emplace_back(list);
          break;
        }
        case ArgKind::OptionalTensorList: {
          c10::List<std::optional<at::Tensor>> list;
          for (int64_t i : arg.inputs) list.push_back(i < 0 ? std::optional<at::Tensor>() : tensor(i));
          s.emplace_back(list);
          break;
        }
        default: s.push_back(arg.constant);
      }
    }
    return s;
  }
};

// Every tensor an operator returned (a Tensor, a tuple of them, or a Tensor[]), in order.
std::vector<at::Tensor> flatten_results(const torch::jit::Stack &results) {
  std::vector<at::Tensor> out;
  for (const c10::IValue &v : results) {
    if (v.isTensor()) {
      out.push_back(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor &t : v.toTensorVector()) out.push_back(t);
    } else if (v.isTuple()) {
      for (const c10::IValue &e : v.toTupleRef().elements()) out.push_back(e.toTensor());
    } else {
      throw std::invalid_argument("the operator returned a " + v.tagKind() + ", not tensors");
    }
  }
  return out;
}

// The plan, parsed once in the Init hook and kept as MindSpore's kernel data, or per call without Init.
template <typename Body>
int run(const char *entry, const ms_ext::detail::RawArgs &raw, Body body) {
  std::string op_name = entry;
  try {
    ms_ext_clear_last_error();
    at::NoGradGuard no_grad;  // grad mode is thread-local: set it for MindSpore's launch thread
    ms_ext::detail::DefaultPlacement::Scope scope(raw);  // the device (and on CUDA, MindSpore's stream)
    const ms_ext::Attrs attrs(raw.extra);
    auto *data = ms_ext::detail::kernel_data<AtenPlan>(raw.extra);
    if (data != nullptr && !data->init_error.empty())
      throw std::runtime_error("kernel initialisation failed: " + data->init_error);
    std::optional<AtenPlan> local;
    if (data == nullptr) local.emplace(attrs);
    const AtenPlan &plan = data != nullptr ? *data->state : *local;
    op_name = plan.name;
    body(plan, attrs, scope.device());
    scope.finish();
  } catch (...) {
    ms_ext::detail::raise(op_name.c_str(), ms_ext::detail::describe_current_exception());
  }
  return 0;
}

}  // namespace

extern "C" MS_EXT_EXPORT int AtenOpInit(int *ndims, int64_t **shapes, const char **, void *extra) {
  static constexpr ms_ext::Signature kNoScratch{};
  return ms_ext::detail::init_entry<AtenPlan>("AtenOp", kNoScratch, ndims, shapes, extra);
}

extern "C" MS_EXT_EXPORT int AtenOpBackwardInit(int *ndims, int64_t **shapes, const char **, void *extra) {
  static constexpr ms_ext::Signature kNoScratch{};
  return ms_ext::detail::init_entry<AtenPlan>("AtenOpBackward", kNoScratch, ndims, shapes, extra);
}

// outputs = op(inputs): into MindSpore's buffers through the out= overload when there is one, else computed and
// copied after checking each result against its buffer.
extern "C" MS_EXT_EXPORT int AtenOp(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                    void *stream, void *extra) {
  const ms_ext::detail::RawArgs raw{nparam, params, ndims, shapes, dtypes, stream, extra};
  return run("AtenOp", raw, [&](const AtenPlan &plan, const ms_ext::Attrs &attrs, at::Device device) {
    const ms_ext::Signature sig = ms_ext::Signature().inputs(plan.num_inputs).outputs(nparam - plan.num_inputs);
    ms_ext::Call call(plan.name.c_str(), sig, raw, attrs, 0, device);
    torch::jit::Stack s = plan.stack([&](int64_t i) { return call.input(static_cast<int>(i)); });
    if (plan.out_op && !plan.out_op_resizes.load()) {
      // Aliases of the output views: a failed resize changes an alias's shape, not the views Call checks.
      torch::jit::Stack with_outputs = s;
      std::vector<at::Tensor> aliases;
      for (int i = 0; i < call.num_outputs(); ++i) {
        aliases.push_back(call.output(i).alias());
        with_outputs.emplace_back(aliases.back());
      }
      try {
        plan.out_op->callBoxed(with_outputs);
        for (int i = 0; i < call.num_outputs(); ++i) {
          if (!aliases[i].is_alias_of(call.output(i)) || aliases[i].sizes() != call.output(i).sizes())
            throw std::logic_error("the out= overload left output " + std::to_string(i) + " with shape " +
                                   ms_ext::shape_string(aliases[i].sizes()) + " instead of " +
                                   ms_ext::shape_string(call.output(i).sizes()));
        }
        call.check_outputs_intact();
        return;
      } catch (const c10::Error &e) {
        if (std::string(e.what()).find("Trying to resize storage that is not resizable") == std::string::npos) throw;
        plan.out_op_resizes.store(true);
      }
    }
    {
      plan.op->callBoxed(s);
      const std::vector<at::Tensor> results = flatten_results(s);
      if (static_cast<int>(results.size()) != call.num_outputs())
        throw std::invalid_argument("the operator returned " + std::to_string(results.size()) +
                                    " tensors for " + std::to_string(call.num_outputs()) + " outputs");
      for (int i = 0; i < call.num_outputs(); ++i) call.set_output(i, results[i]);
    }
    call.check_outputs_intact();
  });
}

// (grad inputs...) = AtenOpBackward(inputs..., cotangents of the outputs...): the operator replayed under torch
// autograd on leaf copies of the inputs, and its vector-Jacobian product. Inputs that are not floating or complex
// (indices, masks) and inputs the outputs do not depend on get zero gradients.
extern "C" MS_EXT_EXPORT int AtenOpBackward(int nparam, void **params, int *ndims, int64_t **shapes,
                                            const char **dtypes, void *stream, void *extra) {
  const ms_ext::detail::RawArgs raw{nparam, params, ndims, shapes, dtypes, stream, extra};
  return run("AtenOpBackward", raw, [&](const AtenPlan &plan, const ms_ext::Attrs &attrs, at::Device device) {
    const int n_in = plan.num_inputs, n_cotangents = nparam - 2 * n_in;
    const ms_ext::Signature sig = ms_ext::Signature().inputs(n_in + n_cotangents).outputs(n_in);
    ms_ext::Call call(plan.name.c_str(), sig, raw, attrs, 0, device);
    at::AutoGradMode enable_grad(true);
    std::vector<bool> differentiable(n_in);
    for (int i = 0; i < n_in; ++i)
      differentiable[i] = at::isFloatingType(call.input(i).scalar_type()) || call.input(i).is_complex();
    std::vector<at::Tensor> leaves;
    std::vector<at::Tensor> results;
    // Some operators refuse a gradient for some floating inputs (batch norm's running statistics, a loss's target):
    // torch names the argument, which then becomes non-differentiable, and the replay runs again.
    for (int attempt = 0;; ++attempt) {
      leaves.clear();
      for (int i = 0; i < n_in; ++i)
        leaves.push_back(differentiable[i] ? call.input(i).detach().requires_grad_(true) : call.input(i));
      torch::jit::Stack s = plan.stack([&](int64_t i) { return leaves.at(i); });
      try {
        plan.op->callBoxed(s);
      } catch (const c10::Error &e) {
        const std::string what = e.what_without_backtrace();
        const std::string marker = "is not differentiable with respect to argument '";
        const size_t at = what.find(marker);
        if (at == std::string::npos || attempt >= n_in) throw;
        const size_t start = at + marker.size();
        const std::string argument = what.substr(start, what.find('\'', start) - start);
        if (!plan.mark_not_differentiable(argument, differentiable)) throw;
        continue;
      }
      results = flatten_results(s);
      break;
    }
    if (static_cast<int>(results.size()) != n_cotangents)
      throw std::invalid_argument("the operator returned " + std::to_string(results.size()) + " tensors for " +
                                  std::to_string(n_cotangents) + " cotangents");
    std::vector<at::Tensor> outputs, cotangents, wrt;
    for (int k = 0; k < n_cotangents; ++k) {
      if (results[k].requires_grad()) {
        outputs.push_back(results[k]);
        cotangents.push_back(call.input(n_in + k));
      }
    }
    for (const at::Tensor &leaf : leaves)
      if (leaf.requires_grad()) wrt.push_back(leaf);
    std::vector<at::Tensor> grads;
    if (!outputs.empty() && !wrt.empty())
      grads = torch::autograd::grad(outputs, wrt, cotangents, /*retain_graph=*/false, /*create_graph=*/false,
                                    /*allow_unused=*/true);
    size_t next = 0;
    for (int i = 0; i < n_in; ++i) {
      at::Tensor grad = leaves[i].requires_grad() && next < grads.size() ? grads[next++] : at::Tensor();
      if (grad.defined()) {
        call.set_output(i, grad);
      } else {
        call.output(i).zero_();
      }
    }
    call.check_outputs_intact();
  });
}
