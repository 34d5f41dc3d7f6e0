// The bridge's call policy: which operators and which calls of them the generic entries run (refusal_of,
// CallRule), in one place, read by the kernels (aten_plan.h) and by aot_ops before it makes an operator
// (aot_ops_aten_refusal, aot_ops_aten_call_refusal in aten_op.cpp).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace aten_bridge {

inline bool is_tensor_type(const c10::TypePtr &type) {
  return type->kind() == c10::TypeKind::TensorType;
}

inline bool is_tensor_argument(const c10::Argument &arg) {
  c10::TypePtr type = arg.type();
  if (type->kind() == c10::TypeKind::OptionalType) type = type->containedType(0);
  if (type->kind() == c10::TypeKind::ListType) {
    type = type->containedType(0);
    if (type->kind() == c10::TypeKind::OptionalType) type = type->containedType(0);
  }
  return is_tensor_type(type);
}

inline std::string qualified_name(const c10::FunctionSchema &schema) {
  return schema.overload_name().empty() ? schema.name() : schema.name() + "." + schema.overload_name();
}

// Operators tagged random or value-sized whose calls can still be run exactly. The tag says what the operator MAY
// do; the call says whether it does: `index` with integer indices has the indices' shape (only a boolean mask
// sizes its result by its values), scaled_dot_product_attention with dropout_p = 0 draws nothing. A call of such
// an operator runs when one of its conditions holds.
enum class Holds {
  Zero,            // a float argument is 0
  False,           // a bool argument is false (not None)
  Given,           // an optional argument is given (not None)
  NonNegative,     // an int argument is >= 0
  IntegerTensors,  // every tensor of the argument has an integer dtype (bool and uint8 are masks): known at launch
};
struct CallCondition {
  const char *argument;
  Holds holds;
};
struct CallRule {
  std::vector<const char *> ops;
  std::vector<CallCondition> any_of;
  const char *otherwise;  // what the call does when no condition holds, and what runs instead
};

inline const std::vector<CallRule> &call_rules() {
  static const std::vector<CallRule> rules = {
      {{"aten::index.Tensor"},
       {{"indices", Holds::IntegerTensors}},
       "a boolean index selects as many elements as it holds True values; integer indices are bridged"},
      {{"aten::repeat_interleave.Tensor"}, {{"output_size", Holds::Given}}, "give output_size"},
      {{"aten::one_hot"}, {{"num_classes", Holds::NonNegative}}, "num_classes=-1 counts the classes: give num_classes"},
      {{"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_flash_attention_for_cpu",
        "aten::_scaled_dot_product_attention_math"},
       {{"dropout_p", Holds::Zero}},
       "dropout_p > 0: attention dropout; with dropout_p=0 it is bridged"},
      {{"aten::dropout", "aten::feature_dropout", "aten::alpha_dropout", "aten::feature_alpha_dropout",
        "aten::native_dropout"},
       {{"p", Holds::Zero}, {"train", Holds::False}},
       "dropout with p > 0 in training"},
      {{"aten::rrelu"}, {{"training", Holds::False}}, "rrelu in training draws its slopes"},
      {{"aten::lstm.input", "aten::lstm.data", "aten::gru.input", "aten::gru.data", "aten::rnn_tanh.input",
        "aten::rnn_tanh.data", "aten::rnn_relu.input", "aten::rnn_relu.data"},
       {{"dropout", Holds::Zero}, {"train", Holds::False}},
       "dropout between layers in training"},
  };
  return rules;
}

inline const CallRule *call_rule_of(const std::string &qualified) {
  for (const CallRule &rule : call_rules())
    for (const char *op : rule.ops)
      if (qualified == op) return &rule;
  return nullptr;
}

// The refusal a tag gives an operator, before its call is looked at ("" for no such tag).
inline std::string tag_refusal(const c10::OperatorHandle &op) {
  if (op.hasTag(at::Tag::nondeterministic_seeded)) return "it draws random numbers, which cannot match torch";
  if (op.hasTag(at::Tag::dynamic_output_shape)) return "its output size depends on the input values";
  return "";
}

// torch's tracing namespaces have no kernels to run (and are registered only once Python imports them: judged by
// the name, before any lookup).
inline std::string tracing_namespace_refusal(const std::string &name) {
  for (const char *internal : {"prims::", "prim::", "higher_order::"})
    if (name.rfind(internal, 0) == 0)
      return std::string("it is not an ATen operator (") + internal + " operators are torch's own, for tracing)";
  return "";
}

// Whether the only argument the operator writes is its first (a Tensor(a!) self, as index_copy_'s).
inline bool writes_first_argument_only(const c10::FunctionSchema &schema) {
  const auto &args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const bool written = args[i].alias_info() != nullptr && args[i].alias_info()->isWrite();
    if (written != (i == 0)) return false;
  }
  return !args.empty();
}

// Why the bridge does not run this operator ("" when it does, or when its call decides: see CallRule): the one
// policy for every call, whether it comes from aot_ops (which asks through aot_ops_aten_call_refusal before
// making an operator) or from a hand-written primitive with these attributes. The bridge runs functional
// operators from tensors to tensors:
// - ATen's, and those a library registers with torch.library (mylib::op, called through the same dispatcher, a
//   Python kernel taking the GIL); not torch's tracing namespaces;
// - nothing that writes into its arguments (in-place and out= overloads would change MindSpore's input buffers);
// - no random numbers (they cannot match torch), no output sizes that depend on input values;
// - tensor results only, and at least one tensor argument (a factory such as from_file reads files).
// `allow_writing_first`: a program's node that writes its first argument in place (a key/value cache's
// index_copy_ into the buffer the program was given to update: aot_ops/_port/buffer_writes.py decides it is exact).
inline std::string refusal_of(const c10::OperatorHandle &op, bool allow_factories, bool allow_writing_first = false) {
  const c10::FunctionSchema &schema = op.schema();
  const std::string internal = tracing_namespace_refusal(schema.name());
  if (!internal.empty()) return internal;
  if (!call_rule_of(qualified_name(schema))) {
    const std::string tagged = tag_refusal(op);
    if (!tagged.empty()) return tagged;
  }
  if (op.hasTag(at::Tag::data_dependent_output))
    return "its output depends on the input values in a way that cannot be inferred";
  if (schema.is_mutable() && !(allow_writing_first && writes_first_argument_only(schema)))
    return "it modifies its arguments (use the functional overload)";
  if (schema.returns().empty()) return "it returns nothing";
  for (const c10::Argument &ret : schema.returns()) {
    const c10::TypePtr &type = ret.type();
    const bool tensors = is_tensor_type(type) || (type->kind() == c10::TypeKind::ListType &&
                                                   is_tensor_type(type->containedType(0)));
    if (!tensors) return "it returns " + type->str() + ", not tensors";
  }
  bool takes_tensor = false;
  for (const c10::Argument &arg : schema.arguments()) takes_tensor = takes_tensor || is_tensor_argument(arg);
  if (!takes_tensor && !allow_factories) return "it takes no tensor (a factory function)";
  if (schema.name() == "aten::from_file") return "it reads a file";
  return "";
}

// A refusal of the bridge's policy (the operator, or this call of it), as opposed to a malformed call.
struct Refused : std::invalid_argument {
  std::string reason;
  Refused(const std::string &message, std::string why) : std::invalid_argument(message), reason(std::move(why)) {}
};

// A boolean or uint8 tensor where integer indices are required (Holds::IntegerTensors).
inline bool is_mask(const at::Tensor &t) {
  return t.defined() && (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte);
}

}  // namespace aten_bridge
