// Output shape and dtype rules of an entry point.
//
// A kernel states its rules once in its Signature, and each is used twice: for inference before the launch
// (the shape rule is the C++ InferShape MindSpore calls, also in GRAPH_MODE with dynamic shapes where dimensions
// may be unknown; the dtype rule is called by aot_ops while MindSpore infers the output type), and at every launch
// to check MindSpore's output buffers before the kernel writes. Dtype rules see input dtypes only (shapes may be
// unknown during inference), so they cannot give 0-dim tensors torch's lower promotion priority: promotion uses
// c10::promoteTypes, which treats every operand alike.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <ms_ext/attrs.h>

namespace ms_ext {

// MindSpore's markers for shapes not known before run time: one unknown dimension, or an unknown rank (the whole
// shape is then {kUnknownRank}).
constexpr int64_t kUnknownDim = -1;
constexpr int64_t kUnknownRank = -2;

using Shape = std::vector<int64_t>;

namespace detail {

// The kernel's parsed state handed to its rules without making every rule a template: a pointer and a tag naming
// its type (one address per type), checked when a rule asks for it.
template <typename State>
inline constexpr char kStateTag = 0;

struct StateRef {
  const void *state = nullptr;
  const void *tag = nullptr;
  template <typename State>
  static StateRef of(const State &state) { return {&state, &kStateTag<State>}; }
};

}  // namespace detail

// The input shapes a shape rule sees: real shapes at launch, possibly unknown ones in GRAPH_MODE inference, and the
// kernel's state (parsed from its attributes once per inference, or the one Init parsed at launch).
class ShapeArgs {
 public:
  ShapeArgs(int num_inputs, const int *ndims, int64_t *const *shapes, const Attrs &attrs,
            detail::StateRef state = {})
      : attrs_(attrs), state_(state) {
    for (int i = 0; i < num_inputs; ++i) {
      const int nd = ndims[i];
      shapes_.emplace_back(nd > 0 ? shapes[i] : nullptr, nd > 0 ? shapes[i] + nd : nullptr);
    }
  }
  ShapeArgs(std::vector<Shape> shapes, const Attrs &attrs, detail::StateRef state = {})
      : shapes_(std::move(shapes)), attrs_(attrs), state_(state) {}
  int num_inputs() const { return static_cast<int>(shapes_.size()); }
  const Shape &shape(int i) const { return shapes_.at(i); }
  int64_t rank(int i) const { return static_cast<int64_t>(shapes_.at(i).size()); }
  bool rank_known(int i) const { return !(shapes_.at(i).size() == 1 && shapes_.at(i)[0] == kUnknownRank); }
  const Attrs &attrs() const { return attrs_; }

  // The kernel's state (MS_EXT_KERNEL_WITH_STATE's STATE): rules read parsed attributes from it instead of
  // parsing them again.
  template <typename State>
  const State &state() const {
    if (state_.state == nullptr || state_.tag != &detail::kStateTag<State>)
      throw std::logic_error("the shape rule asks for a state type the kernel was not declared with");
    return *static_cast<const State *>(state_.state);
  }

 private:
  std::vector<Shape> shapes_;
  const Attrs &attrs_;
  detail::StateRef state_;
};

// The input dtypes a dtype rule sees (no attributes: aot_ops evaluates the rule in Python, away from MindSpore's
// attribute store).
class TypeArgs {
 public:
  explicit TypeArgs(const std::vector<at::ScalarType> &dtypes) : dtypes_(dtypes) {}
  int num_inputs() const { return static_cast<int>(dtypes_.size()); }
  at::ScalarType dtype(int i) const { return dtypes_.at(i); }

 private:
  const std::vector<at::ScalarType> &dtypes_;
};

using ShapeRule = std::vector<Shape> (*)(const ShapeArgs &);
using TypeRule = std::vector<at::ScalarType> (*)(const TypeArgs &);

// ---- building blocks for rules ---------------------------------------------------------------------------------

inline Shape unknown_rank() { return {kUnknownRank}; }

// Wraps a possibly negative dimension index (torch's convention) into [0, rank).
inline int64_t wrap_dim(int64_t dim, int64_t rank) {
  const int64_t r = rank == 0 ? 1 : rank;  // a 0-dim tensor accepts dim 0 and -1, as in torch
  if (dim < -r || dim >= r)
    throw std::out_of_range("dimension " + std::to_string(dim) + " out of range for a tensor of rank " +
                            std::to_string(rank));
  return dim < 0 ? dim + r : dim;
}

// Broadcasting of two shapes, with unknown dimensions: an unknown dimension against 1 or another unknown stays
// unknown; against a known size n > 1 it must be n (or 1) at run time, so the result is n.
inline Shape broadcast_shapes(const Shape &a, const Shape &b) {
  if ((a.size() == 1 && a[0] == kUnknownRank) || (b.size() == 1 && b[0] == kUnknownRank)) return unknown_rank();
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else if (da == kUnknownDim || db == kUnknownDim) {
      out[i] = da == kUnknownDim ? db : da;
    } else {
      throw std::invalid_argument("The size of tensor a (" + std::to_string(da) + ") must match the size of tensor b (" +
                                  std::to_string(db) + ") at non-singleton dimension " + std::to_string(i));
    }
  }
  return out;
}

// Common rules.
inline std::vector<Shape> same_shape_as_input0(const ShapeArgs &args) { return {args.shape(0)}; }
inline std::vector<at::ScalarType> same_type_as_input0(const TypeArgs &args) { return {args.dtype(0)}; }
inline std::vector<at::ScalarType> promoted_type_of_inputs(const TypeArgs &args) {
  at::ScalarType type = args.dtype(0);
  for (int i = 1; i < args.num_inputs(); ++i) type = c10::promoteTypes(type, args.dtype(i));
  return {type};
}
// Backward kernels whose outputs are the gradients of inputs 1..n (same shapes and dtypes).
inline std::vector<Shape> shapes_of_inputs_after_first(const ShapeArgs &args) {
  std::vector<Shape> out;
  for (int i = 1; i < args.num_inputs(); ++i) out.push_back(args.shape(i));
  return out;
}
inline std::vector<at::ScalarType> types_of_inputs_after_first(const TypeArgs &args) {
  std::vector<at::ScalarType> out;
  for (int i = 1; i < args.num_inputs(); ++i) out.push_back(args.dtype(i));
  return out;
}

}  // namespace ms_ext
