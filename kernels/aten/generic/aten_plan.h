// One ATen operator call decoded from attributes (AtenPlan): what the generic entries (aten_op.cpp) and the
// program entry (program.cpp) share. The attribute format is described in aten_op.cpp.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros_like.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <ms_ext/ms_ext.h>

#include "call_policy.h"
#include "size_expr.h"

namespace aten_bridge {

// Two torch messages the bridge reacts to (torch has no error codes for them). tests/test_aten.py checks that the
// installed torch still words them so: a change is a failing test, not a silent loss of the reaction.
// An out= overload that must resize its output cannot write into MindSpore's (fixed) buffer:
inline constexpr const char *kTorchResizeRefused = "Trying to resize storage that is not resizable";
// An input whose gradient an operator refuses (batch norm's running statistics), followed by its name and a quote:
inline constexpr const char *kTorchNotDifferentiable = "is not differentiable with respect to argument '";

enum class ArgKind : int64_t {
  Tensor = 0,          // value: input index
  None = 1,
  Bool = 2,
  Int = 3,
  Float = 4,           // value: float (sent as text, read as the exact double: ms_ext/c_api.h)
  Str = 5,
  IntList = 6,
  FloatList = 7,       // value: float list
  BoolList = 8,        // value: int list of 0/1
  ScalarInt = 9,
  ScalarFloat = 10,    // value: float
  ScalarBool = 11,
  Dtype = 12,          // value: MindSpore dtype name ("float32")
  TensorList = 13,     // value: int list of input indices
  OptionalTensorList = 14,  // value: int list of input indices, -1 for None
  WrappedInt = 15,     // a Python number given for a Tensor argument (torch's "wrapped number")
  WrappedFloat = 16,   // value: float
  WrappedBool = 17,
  CallTimeTensorList = 18,  // value: the input index where the list starts; its length is decided per call
  SymInt = 19,         // value: str, a size expression
  SymIntList = 20,     // value: str, comma-separated size expressions
  WrappedSymInt = 21,  // value: str, a size expression given for a Tensor argument (a wrapped number at run time)
};

// A 0-dim CPU tensor marked as a wrapped number: it promotes like a Python scalar (x_f16 * 2.0 stays float16).
inline at::Tensor wrapped_number(const at::Scalar &value) {
  at::Tensor t = at::scalar_tensor(value, at::TensorOptions().dtype(value.type()));
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

// One schema argument's value, decoded from the attributes once (when MindSpore initialises the kernel).
struct Arg {
  ArgKind kind;
  c10::IValue constant;            // every non-tensor kind
  std::vector<int64_t> inputs;     // Tensor, TensorList, OptionalTensorList: input indices
  std::vector<aten_bridge::SizeExpr> sizes;  // SymInt, SymIntList
  bool optional = false;           // the schema accepts None for it
  bool integer_only = false;       // its tensors must have integer dtypes (CallRule's IntegerTensors, checked
                                   // when the stack is built: the dtypes are known at launch only)
};

// A comma-separated list of MindSpore dtype names ("float32,,int64"), an empty name standing for a None input:
// how aot_ops passes input dtypes to the refusal check and a compiled program's input dtypes.
inline std::vector<std::optional<at::ScalarType>> parse_dtype_list(const std::string &text) {
  std::vector<std::optional<at::ScalarType>> dtypes;
  if (text.empty()) return dtypes;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string name = text.substr(start, end - start);
    dtypes.push_back(name.empty() ? std::nullopt
                                  : std::optional<at::ScalarType>(ms_ext::scalar_type_from_ms(name.c_str())));
    start = end + 1;
  }
  return dtypes;
}

inline c10::OperatorHandle find_operator(const std::string &qualified) {
  const size_t dot = qualified.find('.', qualified.find("::"));
  const std::string name = qualified.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : qualified.substr(dot + 1);
  return c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
}

// Whether `out` is the out= overload of `op`: the same operator, the same arguments, then one out tensor per
// result. (The attribute aten_out_op comes from the caller; a mismatched one would compute another function.)
inline std::string out_variant_mismatch(const c10::OperatorHandle &op, const c10::OperatorHandle &out) {
  const c10::FunctionSchema &f = op.schema(), &o = out.schema();
  if (o.name() != f.name()) return "is another operator";
  const auto &args = f.arguments(), &out_args = o.arguments();
  if (out_args.size() != args.size() + f.returns().size()) return "takes other arguments";
  for (size_t i = 0; i < args.size(); ++i) {
    if (out_args[i].name() != args[i].name() || out_args[i].type()->str() != args[i].type()->str() ||
        out_args[i].is_out())
      return "takes other arguments";
  }
  for (size_t i = args.size(); i < out_args.size(); ++i) {
    if (!out_args[i].is_out() || !is_tensor_type(out_args[i].type())) return "has other outputs";
  }
  return "";
}

// Where this launch's inputs sit among the arguments: how many there are, and the span of a tensor list whose
// length is decided at call time (the inputs after it are numbered as if it were empty).
struct CallLayout {
  int num_inputs = 0;
  int list_start = -1;
  int list_length = 0;
  int64_t input_index(int64_t encoded) const {
    return list_start >= 0 && encoded >= list_start ? encoded + list_length : encoded;
  }
};

// The parsed call: which operator, and how to build its argument stack from MindSpore's inputs.
// The alignment in bytes each argument of `op` needs (empty: none). torch 2.14's _weight_int8pack_mm on an AVX-512
// CPU faulted (SIGSEGV) with its activations 16 bytes off 32 and its int8 weight 8 bytes off 16 (probed): the
// activations get 64 (a copy is small), the weight 16, which MindSpore's Parameters have (a copy of the weight at
// every call would cost what the kernel saves).
inline std::vector<uintptr_t> alignment_needed(const std::string &op) {
  if (op.rfind("aten::_weight_int8pack_mm", 0) == 0) return {64, 16};
  return {};
}

struct AtenPlan {
  std::string name;
  std::optional<c10::OperatorHandle> op;
  std::optional<c10::OperatorHandle> out_op;
  int num_inputs = 0;   // -1: decided per call by a call-time tensor list
  int num_outputs = -1;
  std::vector<Arg> args;
  int list_start = -1;  // input index of the call-time tensor list, if any
  int fixed_inputs = 0; // inputs besides the call-time list
  // The last inputs that only lend their shapes to size expressions (a factory sized by a dimension of the
  // network's input, run as its own operator: torch.arange(x.shape[1])); no argument takes them.
  int shape_inputs = 0;
  std::optional<aten_bridge::ShapeExprs> out_shapes;
  // Some out= kernels write intermediate results into `out` at another shape (mse_loss.out computes the
  // elementwise loss in it before reducing). Into MindSpore's fixed-size buffer that fails at the resize, before
  // anything is written; the plan then uses the functional overload from that call on.
  mutable std::atomic<bool> out_op_resizes{false};
  std::string value_refusal_text;  // the refusal of a call whose tensors fail an IntegerTensors condition
  // Some ATen CPU kernels load their inputs with aligned vector instructions, safe on torch's own buffers (its CPU
  // allocator aligns to 64 bytes) but not always on MindSpore's (16-byte aligned): such a kernel gets aligned
  // copies of the inputs that are not (align_inputs). The alignment each argument needs, by stack position.
  std::vector<uintptr_t> input_alignment;

  // `allow_factories`: a program's node may create a tensor from sizes alone (an RNN's zero initial state sized by
  // the batch), a lone operator may not (AtenOp runs what its attributes name; see refusal_of).
  // `allow_writing_first`: a program's node may write its first argument in place (call_policy.h, refusal_of).
  explicit AtenPlan(const ms_ext::Attrs &attrs, bool allow_factories = false, bool allow_writing_first = false)
      : name(attrs.get<std::string>("aten_op")), input_alignment(alignment_needed(name)) {
    try {
      parse(attrs, allow_factories, allow_writing_first);
    } catch (const Refused &refused) {
      throw Refused(name + ": " + refused.what(), refused.reason);
    } catch (...) {  // the operator's name first: these errors surface as the kernel's (AtenOp) initialisation
      throw std::invalid_argument(name + ": " + ms_ext::detail::describe_current_exception());
    }
  }

  // The stack's CPU tensors copied where they are less aligned than the kernel needs (ATen's allocator: 64 bytes).
  void align_inputs(torch::jit::Stack &stack) const {
    for (size_t i = 0; i < input_alignment.size() && i < stack.size(); ++i) {
      if (!stack[i].isTensor()) continue;
      const at::Tensor &tensor = stack[i].toTensor();
      if (tensor.defined() && tensor.device().is_cpu() &&
          reinterpret_cast<uintptr_t>(tensor.data_ptr()) % input_alignment[i] != 0)
        stack[i] = tensor.clone(at::MemoryFormat::Contiguous);
    }
  }

  // The refusal of a call whose tensors have these dtypes (CallRule's IntegerTensors); "" when it runs. An input
  // whose dtype is unknown (nullopt) is not judged here: the launch judges it.
  template <typename DtypeOf>
  std::string value_refusal(const CallLayout &layout, DtypeOf dtype_of) const {
    for (const Arg &arg : args) {
      if (!arg.integer_only) continue;
      for (int64_t i : arg.inputs) {
        if (i < 0) continue;
        const std::optional<at::ScalarType> type = dtype_of(layout.input_index(i));
        if (type && (*type == at::kBool || *type == at::kByte)) return value_refusal_text;
      }
    }
    return "";
  }

  void parse(const ms_ext::Attrs &attrs, bool allow_factories, bool allow_writing_first) {
    const std::string internal = tracing_namespace_refusal(name);
    if (!internal.empty()) throw Refused("cannot be bridged: " + internal, internal);
    op = find_operator(name);
    shape_inputs = static_cast<int>(attrs.get<int64_t>("aten_shape_inputs", 0));
    // A factory sized by another input's shape (shape_inputs) is a tensor -> tensor operator like any other.
    const std::string refused = refusal_of(*op, allow_factories || shape_inputs > 0, allow_writing_first);
    if (!refused.empty()) throw Refused("cannot be bridged: " + refused, refused);
    const std::string out_name = attrs.get<std::string>("aten_out_op", "");
    if (!out_name.empty()) {
      out_op = find_operator(out_name);
      const std::string mismatch = out_variant_mismatch(*op, *out_op);
      if (!mismatch.empty())
        throw std::invalid_argument("aten_out_op " + out_name + " is not the out= overload of " + name + ": it " +
                                    mismatch);
    }
    num_inputs = static_cast<int>(attrs.get<int64_t>("aten_num_inputs"));
    if (shape_inputs < 0 || (shape_inputs > 0 && num_inputs < shape_inputs))
      throw std::invalid_argument("aten_shape_inputs must be between 0 and aten_num_inputs");
    num_outputs = static_cast<int>(attrs.get<int64_t>("aten_num_outputs", -1));
    const std::vector<int64_t> kinds = attrs.get<std::vector<int64_t>>("aten_kinds");
    const auto &schema_args = op->schema().arguments();
    if (kinds.size() != schema_args.size())
      throw std::invalid_argument(name + " takes " + std::to_string(schema_args.size()) +
                                  " arguments, the attributes describe " + std::to_string(kinds.size()));
    for (size_t i = 0; i < kinds.size(); ++i) {
      args.push_back(decode(attrs, i, static_cast<ArgKind>(kinds[i])));
      args.back().optional = schema_args[i].type()->kind() == c10::TypeKind::OptionalType;
      if (args.back().kind == ArgKind::CallTimeTensorList) {
        if (list_start >= 0) throw std::invalid_argument("only one tensor list can be given at call time");
        list_start = static_cast<int>(args.back().inputs.at(0));
      } else {
        for (int64_t input : args.back().inputs) fixed_inputs += input >= 0 ? 1 : 0;
      }
    }
    apply_call_rule();
    if ((num_inputs < 0) != (list_start >= 0) || (num_inputs < 0 && num_outputs < 0))
      throw std::invalid_argument("aten_num_inputs is -1 exactly when a tensor list is given at call time, "
                                  "and aten_num_outputs must then be set");
    if (num_inputs >= 0) check_every_input_used();
    if (attrs.has("aten_out_shapes")) {
      if (num_outputs < 0) throw std::invalid_argument("aten_out_shapes needs aten_num_outputs");
      out_shapes.emplace(attrs.get<std::string>("aten_out_shapes"), num_outputs);
    }
  }

  // An operator its tags refuse runs when its call satisfies one condition of its CallRule. Conditions on tensors'
  // dtypes cannot be judged from the attributes: they mark their argument, and the launch judges them.
  void apply_call_rule() {
    const CallRule *rule = call_rule_of(name);
    if (!rule) return;
    const std::string why = tag_refusal(*op) + " (" + rule->otherwise + ")";
    const auto &arguments = op->schema().arguments();
    bool holds = false;
    for (const CallCondition &condition : rule->any_of) {
      size_t a = 0;
      while (a < arguments.size() && arguments[a].name() != condition.argument) ++a;
      if (a == arguments.size()) throw std::logic_error(std::string("the call rule names no argument ") + condition.argument);
      const c10::IValue &value = args[a].constant;
      switch (condition.holds) {
        case Holds::Zero: holds = holds || (value.isDouble() && value.toDouble() == 0.0); break;
        case Holds::False: holds = holds || (value.isBool() && !value.toBool()); break;
        case Holds::Given: holds = holds || args[a].kind != ArgKind::None; break;
        case Holds::NonNegative:
          holds = holds || (value.isInt() && value.toInt() >= 0) || args[a].kind == ArgKind::SymInt;
          break;
        case Holds::IntegerTensors:
          args[a].integer_only = true;
          value_refusal_text = why;
          holds = true;
          break;
      }
    }
    if (!holds) throw Refused("cannot be bridged: " + why, why);
  }

  // Each input MindSpore passes is an argument of the operator, once or more: an input no argument takes is a
  // call that does not mean what its caller thinks (the result would silently ignore a tensor).
  void check_every_input_used() const {
    std::vector<bool> used(num_inputs, false);
    for (const Arg &arg : args)
      for (int64_t input : arg.inputs) {
        if (input >= num_inputs)
          throw std::invalid_argument("an argument takes input " + std::to_string(input) + ", but aten_num_inputs is " +
                                      std::to_string(num_inputs));
        if (input >= 0) used[input] = true;
      }
    for (int i = 0; i < num_inputs - shape_inputs; ++i)
      if (!used[i])
        throw std::invalid_argument("input " + std::to_string(i) + " is not an argument of the operator (" +
                                    std::to_string(num_inputs) + " inputs given)");
    for (int i = num_inputs - shape_inputs; i < num_inputs; ++i)
      if (used[i])
        throw std::invalid_argument("input " + std::to_string(i) + " lends its shape only (aten_shape_inputs), "
                                    "but an argument takes it");
  }

  static Arg decode(const ms_ext::Attrs &attrs, size_t i, ArgKind kind) {
    const std::string key = "aten_arg_" + std::to_string(i);
    const char *k = key.c_str();
    Arg arg{kind, c10::IValue(), {}, {}};
    switch (kind) {
      case ArgKind::Tensor:
      case ArgKind::CallTimeTensorList: arg.inputs = {attrs.get<int64_t>(k)}; break;
      case ArgKind::TensorList:
      case ArgKind::OptionalTensorList: arg.inputs = attrs.get<std::vector<int64_t>>(k); break;
      case ArgKind::None: break;
      case ArgKind::Bool: arg.constant = attrs.get<bool>(k); break;
      case ArgKind::Int: arg.constant = attrs.get<int64_t>(k); break;
      case ArgKind::Float: arg.constant = attrs.get<double>(k); break;
      case ArgKind::Str: arg.constant = attrs.get<std::string>(k); break;
      case ArgKind::IntList: arg.constant = attrs.get<std::vector<int64_t>>(k); break;
      case ArgKind::FloatList: arg.constant = attrs.get<std::vector<double>>(k); break;
      case ArgKind::BoolList: {
        c10::List<bool> values;
        for (int64_t v : attrs.get<std::vector<int64_t>>(k)) values.push_back(v != 0);
        arg.constant = values;
        break;
      }
      case ArgKind::ScalarInt: arg.constant = at::Scalar(attrs.get<int64_t>(k)); break;
      case ArgKind::ScalarFloat: arg.constant = at::Scalar(attrs.get<double>(k)); break;
      case ArgKind::ScalarBool: arg.constant = at::Scalar(attrs.get<bool>(k)); break;
      case ArgKind::Dtype: arg.constant = ms_ext::scalar_type_from_ms(attrs.get<std::string>(k).c_str()); break;
      case ArgKind::WrappedInt: arg.constant = wrapped_number(attrs.get<int64_t>(k)); break;
      case ArgKind::WrappedFloat: arg.constant = wrapped_number(attrs.get<double>(k)); break;
      case ArgKind::WrappedBool: arg.constant = wrapped_number(attrs.get<bool>(k)); break;
      case ArgKind::SymInt:
      case ArgKind::WrappedSymInt: arg.sizes = {aten_bridge::SizeExpr::parse(attrs.get<std::string>(k))}; break;
      case ArgKind::SymIntList: arg.sizes = aten_bridge::SizeExpr::parse_list(attrs.get<std::string>(k)); break;
      default: throw std::invalid_argument("argument " + std::to_string(i) + " has an unknown kind");
    }
    return arg;
  }

  // The inputs of a forward launch with `nparam` parameters (inputs, then outputs).
  // A wrong count must be an error before anything indexes the parameters (a primitive made by hand can be called
  // with anything).
  int forward_inputs(int nparam) const {
    const int n_in = num_inputs >= 0 ? num_inputs : nparam - num_outputs;
    const int n_out = nparam - n_in;
    if (n_in < 0 || n_out < 1 || (num_outputs >= 0 && n_out != num_outputs))
      throw std::invalid_argument(count_error(nparam, n_in, num_outputs));
    return n_in;
  }
  // The inputs of a backward launch: inputs, one cotangent per forward output, then one gradient per input.
  int backward_inputs(int nparam) const {
    const int n_in = num_inputs >= 0 ? num_inputs : (nparam - num_outputs) / 2;
    const int n_cotangents = nparam - 2 * n_in;
    if (n_in < 0 || n_cotangents < 1 || (num_outputs >= 0 && n_cotangents != num_outputs))
      throw std::invalid_argument("the backward expects " + std::to_string(n_in) + " input(s), " +
                                  (num_outputs >= 0 ? std::to_string(num_outputs) : std::string("the")) +
                                  " cotangent(s) and " + std::to_string(n_in) + " gradient(s), but MindSpore passed " +
                                  std::to_string(nparam) + " parameters");
    return n_in;
  }

  std::string count_error(int nparam, int n_in, int n_out) const {
    return "expected " + (num_inputs >= 0 ? std::to_string(num_inputs) : std::string("the")) + " input(s) and " +
           (n_out >= 0 ? std::to_string(n_out) : std::string("at least one")) + " output(s), but MindSpore passed " +
           std::to_string(nparam) + " parameters; check the number of arguments of the operator";
  }

  CallLayout layout(int given) const {
    CallLayout layout{given, list_start, 0};
    if (list_start >= 0) {
      layout.list_length = given - fixed_inputs;
      if (layout.list_length < 0)
        throw std::invalid_argument("expected at least " + std::to_string(fixed_inputs) + " input(s), got " +
                                    std::to_string(given));
    }
    return layout;
  }

  // Marks the inputs of schema argument `name` as not differentiable; false if it has no input to mark.
  bool mark_not_differentiable(const std::string &name, const CallLayout &layout,
                               std::vector<bool> &differentiable) const {
    const auto &arguments = op->schema().arguments();
    bool marked = false;
    for (size_t a = 0; a < arguments.size(); ++a) {
      if (arguments[a].name() != name) continue;
      std::vector<int64_t> inputs;
      for (int64_t i : args[a].inputs) inputs.push_back(i < 0 ? i : layout.input_index(i));
      if (args[a].kind == ArgKind::CallTimeTensorList) {
        inputs.clear();
        for (int k = 0; k < layout.list_length; ++k) inputs.push_back(layout.list_start + k);
      }
      for (int64_t i : inputs) {
        if (i >= 0 && differentiable.at(i)) {
          differentiable[i] = false;
          marked = true;
        }
      }
    }
    return marked;
  }

  // The argument stack for the functional operator, with `tensor(i)` giving input i (undefined for a None input)
  // and `shapes` the input shapes (for sizes computed from them).
  template <typename TensorOf>
  torch::jit::Stack stack(const CallLayout &layout, TensorOf tensor, const std::vector<ms_ext::Shape> &shapes) const {
    const auto &arguments = op->schema().arguments();
    torch::jit::Stack s;
    s.reserve(args.size());
    for (size_t a = 0; a < args.size(); ++a) {
      const Arg &arg = args[a];
      switch (arg.kind) {
        case ArgKind::Tensor: {
          at::Tensor t = tensor(layout.input_index(arg.inputs[0]));
          if (arg.integer_only && is_mask(t)) throw Refused("cannot be bridged: " + value_refusal_text, value_refusal_text);
          if (!t.defined() && !arg.optional)
            throw std::invalid_argument("argument '" + arguments[a].name() + "' is None, but " + name +
                                        " needs a tensor there");
          s.emplace_back(t.defined() ? c10::IValue(t) : c10::IValue());
          break;
        }
        case ArgKind::TensorList:
        case ArgKind::CallTimeTensorList: {
          c10::List<at::Tensor> list;
          if (arg.kind == ArgKind::TensorList) {
            for (int64_t i : arg.inputs) list.push_back(defined_tensor(tensor(layout.input_index(i)), a));
            for (const at::Tensor &t : list)
              if (arg.integer_only && is_mask(t))
                throw Refused("cannot be bridged: " + value_refusal_text, value_refusal_text);
          } else {
            for (int k = 0; k < layout.list_length; ++k) list.push_back(defined_tensor(tensor(layout.list_start + k), a));
          }
          s.emplace_back(list);
          break;
        }
        case ArgKind::OptionalTensorList: {
          c10::List<std::optional<at::Tensor>> list;
          for (int64_t i : arg.inputs) {
            at::Tensor t = i < 0 ? at::Tensor() : tensor(layout.input_index(i));
            if (arg.integer_only && is_mask(t))
              throw Refused("cannot be bridged: " + value_refusal_text, value_refusal_text);
            list.push_back(t.defined() ? std::optional<at::Tensor>(t) : std::optional<at::Tensor>());
          }
          s.emplace_back(list);
          break;
        }
        case ArgKind::SymInt: s.emplace_back(evaluate(arg.sizes[0], shapes)); break;
        case ArgKind::WrappedSymInt: s.emplace_back(wrapped_number(evaluate(arg.sizes[0], shapes))); break;
        case ArgKind::SymIntList: {
          std::vector<int64_t> values;
          for (const aten_bridge::SizeExpr &e : arg.sizes) values.push_back(evaluate(e, shapes));
          s.emplace_back(values);
          break;
        }
        default: s.push_back(arg.constant);
      }
    }
    return s;
  }

 private:
  at::Tensor defined_tensor(at::Tensor t, size_t a) const {
    if (!t.defined())
      throw std::invalid_argument("argument '" + op->schema().arguments()[a].name() + "' holds None, but " + name +
                                  " needs tensors there");
    return t;
  }

  static int64_t evaluate(const aten_bridge::SizeExpr &e, const std::vector<ms_ext::Shape> &shapes) {
    return e.evaluate(shapes);  // at launch every dimension is known
  }
};

// The shapes of a launch's inputs (a None input counts as 0-dim), for size expressions.
inline std::vector<ms_ext::Shape> input_shapes(const ms_ext::Call &call) {
  std::vector<ms_ext::Shape> shapes;
  for (int i = 0; i < call.num_inputs(); ++i) {
    const at::Tensor &t = call.input(i);
    shapes.emplace_back(t.defined() ? ms_ext::Shape(t.sizes().begin(), t.sizes().end()) : ms_ext::Shape());
  }
  return shapes;
}

// Every tensor an operator returned (a Tensor, a tuple of them, or a Tensor[]), in order.
inline std::vector<at::Tensor> flatten_results(const torch::jit::Stack &results) {
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

}  // namespace aten_bridge
