// Sizes that depend on input shapes, evaluated at run time.
//
// A graph exported with a dynamic batch computes some sizes from the input shapes (view(x, [s0 * 16, 64]) where s0
// is x's batch). aot_ops sends each such size as a small postfix program over the dimensions of the operator's
// own inputs (aot_ops/_aten/sizes.py writes it):
//   "d0.0 16 *"      dim 0 of input 0, times 16
//   tokens: integers, dI.J (dim J of input I), and the operators + - * // % max min (all on int64; // and % floor
//   like Python, as torch's symbolic sizes do)
// A program is parsed once (when MindSpore initialises the kernel) and evaluated at every launch, and by the C++
// shape inference with MindSpore's unknown dimensions (-1), which make the result unknown too.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <ms_ext/infer.h>

namespace aten_bridge {

class SizeExpr {
 public:
  SizeExpr() = default;

  static SizeExpr parse(const std::string &text) {
    SizeExpr expr;
    expr.text_ = text;
    size_t depth = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t end = text.find(' ', pos);
      const std::string token = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
      pos = end == std::string::npos ? text.size() : end + 1;
      if (token.empty()) continue;
      Step step = parse_token(token, text);
      if (step.op == Op::Const || step.op == Op::Dim) {
        ++depth;
      } else {
        if (depth < 2) throw std::invalid_argument("size expression '" + text + "' is malformed");
        --depth;
      }
      expr.steps_.push_back(step);
    }
    if (depth != 1) throw std::invalid_argument("size expression '" + text + "' is malformed");
    return expr;
  }

  // A comma-separated list of expressions ("d0.0,256"); an empty text is an empty list.
  static std::vector<SizeExpr> parse_list(const std::string &text) {
    std::vector<SizeExpr> out;
    if (text.empty()) return out;
    size_t start = 0;
    while (true) {
      const size_t comma = text.find(',', start);
      out.push_back(parse(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return out;
  }

  // The value for these input shapes; kUnknownDim when it depends on a dimension MindSpore does not know yet.
  // Unknown-ness travels beside each value: a constant -1 (`-s0` is "-1 d0.0 *") is a value, not kUnknownDim.
  int64_t evaluate(const std::vector<ms_ext::Shape> &inputs) const {
    struct Value {
      int64_t value;
      bool known;
    };
    std::vector<Value> stack;
    for (const Step &s : steps_) {
      if (s.op == Op::Const) {
        stack.push_back({s.value, true});
        continue;
      }
      if (s.op == Op::Dim) {
        if (s.input >= static_cast<int64_t>(inputs.size()))
          throw std::invalid_argument("size expression '" + text_ + "' reads input " + std::to_string(s.input) +
                                      ", but the operator has " + std::to_string(inputs.size()) + " input(s)");
        const ms_ext::Shape &shape = inputs[s.input];
        if (shape.size() == 1 && shape[0] == ms_ext::kUnknownRank) {
          stack.push_back({0, false});
          continue;
        }
        if (s.value >= static_cast<int64_t>(shape.size()))
          throw std::invalid_argument("size expression '" + text_ + "' reads dimension " + std::to_string(s.value) +
                                      " of input " + std::to_string(s.input) + ", which has rank " +
                                      std::to_string(shape.size()));
        const int64_t dim = shape[s.value];
        stack.push_back({dim, dim != ms_ext::kUnknownDim});
        continue;
      }
      const Value b = stack.back();
      stack.pop_back();
      const Value a = stack.back();
      stack.back() = (a.known && b.known) ? Value{apply(s.op, a.value, b.value), true} : Value{0, false};
    }
    return stack.back().known ? stack.back().value : ms_ext::kUnknownDim;
  }

  const std::string &text() const { return text_; }

 private:
  enum class Op { Const, Dim, Add, Sub, Mul, FloorDiv, Mod, Max, Min };
  struct Step {
    Op op;
    int64_t value = 0;  // Const: the value; Dim: the dimension
    int64_t input = 0;  // Dim: the input
  };

  static Step parse_token(const std::string &token, const std::string &text) {
    if (token == "+") return {Op::Add};
    if (token == "-") return {Op::Sub};
    if (token == "*") return {Op::Mul};
    if (token == "//") return {Op::FloorDiv};
    if (token == "%") return {Op::Mod};
    if (token == "max") return {Op::Max};
    if (token == "min") return {Op::Min};
    try {
      if (token[0] == 'd') {
        const size_t dot = token.find('.');
        if (dot == std::string::npos) throw std::invalid_argument(token);
        size_t used_input = 0, used_dim = 0;
        const std::string input = token.substr(1, dot - 1), dim = token.substr(dot + 1);
        Step step{Op::Dim, std::stoll(dim, &used_dim), std::stoll(input, &used_input)};
        if (used_input != input.size() || used_dim != dim.size() || step.input < 0 || step.value < 0)
          throw std::invalid_argument(token);
        return step;
      }
      size_t used = 0;
      Step step{Op::Const, std::stoll(token, &used)};
      if (used != token.size()) throw std::invalid_argument(token);
      return step;
    } catch (const std::logic_error &) {  // stoll's invalid_argument / out_of_range, or ours
      throw std::invalid_argument("size expression '" + text + "' has an invalid token '" + token + "'");
    }
  }

  int64_t apply(Op op, int64_t a, int64_t b) const {
    switch (op) {
      case Op::Add: return a + b;
      case Op::Sub: return a - b;
      case Op::Mul: return a * b;
      case Op::Max: return a > b ? a : b;
      case Op::Min: return a < b ? a : b;
      case Op::FloorDiv:
      case Op::Mod: {
        if (b == 0) throw std::invalid_argument("size expression '" + text_ + "' divides by zero");
        int64_t q = a / b;
        if ((a % b != 0) && ((a < 0) != (b < 0))) --q;  // floor, as Python and torch's FloorDiv
        return op == Op::FloorDiv ? q : a - q * b;
      }
      default: throw std::logic_error("not a binary operator");
    }
  }

  std::string text_;
  std::vector<Step> steps_;
};

// Output shapes written as size expressions: outputs separated by '|', dimensions by ',' ("d0.0,10|d0.0").
class ShapeExprs {
 public:
  ShapeExprs() = default;
  ShapeExprs(const std::string &text, int num_outputs) {
    size_t start = 0;
    for (int k = 0; k < num_outputs; ++k) {
      const size_t bar = text.find('|', start);
      if ((bar == std::string::npos) != (k == num_outputs - 1))
        throw std::invalid_argument("output shapes '" + text + "' do not describe " + std::to_string(num_outputs) +
                                    " output(s)");
      outputs_.push_back(SizeExpr::parse_list(text.substr(start, bar == std::string::npos ? std::string::npos
                                                                                          : bar - start)));
      start = bar + 1;
    }
  }

  std::vector<ms_ext::Shape> evaluate(const std::vector<ms_ext::Shape> &inputs) const {
    std::vector<ms_ext::Shape> out;
    for (const std::vector<SizeExpr> &dims : outputs_) {
      ms_ext::Shape shape;
      for (const SizeExpr &d : dims) shape.push_back(d.evaluate(inputs));
      out.push_back(std::move(shape));
    }
    return out;
  }

  bool empty() const { return outputs_.empty(); }

 private:
  std::vector<std::vector<SizeExpr>> outputs_;
};

}  // namespace aten_bridge
