// What an entry point expects and produces, stated once (in the spirit of XLA FFI's Bind()): ms_ext checks every
// call against it before the kernel body runs, so no kernel re-implements argument checking.
//
// A Signature is a literal type: MS_EXT_KERNEL keeps it in a constexpr variable, which lets the macro give the
// C++ InferShape function the return type MindSpore expects for the kernel's number of outputs.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include <ms_ext/dtypes.h>
#include <ms_ext/infer.h>

namespace ms_ext {

// Byte sizes of a kernel's scratch buffers for the given input shapes; a size may be kUnknownDim when it depends
// on a dimension that is unknown when MindSpore initialises the kernel (dynamic shapes).
using ScratchRule = std::vector<int64_t> (*)(const ShapeArgs &);

class Signature {
 public:
  constexpr Signature() = default;

  // Number of input and output tensors. MindSpore passes inputs, outputs, then workspaces in `params`.
  constexpr Signature &inputs(int n) { inputs_ = n; return *this; }
  constexpr Signature &outputs(int n) { outputs_ = n; return *this; }
  // Scalar types accepted for every input tensor (all types when never called).
  constexpr Signature &dtypes(const DtypeSet &allowed) { dtypes_ = allowed; return *this; }
  // Output shapes as a function of input shapes (and attributes). Enables C++ shape inference, hence dynamic
  // shapes in GRAPH_MODE, and checks MindSpore's output buffers at every launch.
  constexpr Signature &shapes(ShapeRule rule) { shapes_ = rule; return *this; }
  // Output dtypes as a function of input dtypes: inference (through aot_ops) and the launch-time check.
  constexpr Signature &types(TypeRule rule) { types_ = rule; return *this; }
  // `count` scratch buffers whose byte sizes `rule` gives. ms_ext asks MindSpore for them when the kernel is
  // initialised; when their size depends on a dimension unknown at that time, it allocates them per call instead.
  constexpr Signature &scratch(int count, ScratchRule rule) { scratch_count_ = count; scratch_ = rule; return *this; }
  // The entry computed inputs()/outputs() from its own attributes (say, an operator's declared number of outputs),
  // so it knows where the inputs end without the `ms_ext_io` attribute Call otherwise relies on.
  constexpr Signature &split_from_attributes() { split_from_attributes_ = true; return *this; }
  // An attribute the kernel's state reads, with its C++ type (bool, int64_t, double, std::string,
  // std::vector<int64_t>, std::vector<double>, ...). A kernel that declares its attributes has every read checked
  // against the declaration, and aot_ops refuses an operator given an attribute the kernel does not declare (a
  // misspelt name would otherwise be ignored in favour of the default).
  template <typename T>
  constexpr Signature &attr(const char *name) {
    if (attrs_.count == AttrDecls::kCapacity) throw std::logic_error("too many attributes for one Signature");
    attrs_.items[attrs_.count++] = AttrDecl{name, detail::AttrKind<T>::value};
    attrs_.declared = true;
    return *this;
  }
  // The kernel reads no attributes (what MS_EXT_KERNEL, the macro without state, declares).
  constexpr Signature &no_attributes() { attrs_.declared = true; return *this; }

  constexpr int num_inputs() const { return inputs_; }
  constexpr int num_outputs() const { return outputs_; }
  constexpr const DtypeSet &input_dtypes() const { return dtypes_; }
  constexpr ShapeRule shape_rule() const { return shapes_; }
  constexpr TypeRule type_rule() const { return types_; }
  constexpr int num_scratch() const { return scratch_count_; }
  constexpr ScratchRule scratch_rule() const { return scratch_; }
  constexpr bool split_known() const { return split_from_attributes_; }
  constexpr const AttrDecls &attributes() const { return attrs_; }

  // Fails with the message users see (from Python or C++) when an input dtype is not supported.
  void check_input_dtypes(const std::vector<at::ScalarType> &dtypes) const {
    for (size_t i = 0; i < dtypes.size(); ++i) {
      if (dtypes[i] == at::ScalarType::Undefined) continue;  // a None input (Call's none_inputs)
      if (!dtypes_.empty() && !dtypes_.contains(dtypes[i]))
        throw std::invalid_argument("input " + std::to_string(i) + " has dtype " + ms_dtype_name(dtypes[i]) +
                                    ", which this operator does not support (supported: " + dtypes_.to_string() +
                                    ")");
    }
  }

  // "inputs=1;outputs=1;infer=1;dtypes=float16,float32;attrs=negative_slope:2" (dtypes empty = any; infer=1 when
  // both rules exist; attrs, present when declared: name:kind with kind an ms_ext_attr_kind). Every MS_EXT_KERNEL
  // exports it as `ms_ext_signature_<NAME>`, so aot_ops checks calls in Python with the same rules and lets
  // MindSpore use the C++ inference when the kernel has it.
  std::string describe() const {
    std::string text = "inputs=" + std::to_string(inputs_) + ";outputs=" + std::to_string(outputs_) +
                       ";infer=" + (shapes_ != nullptr && types_ != nullptr ? "1" : "0") +
                       ";dtypes=" + dtypes_.to_string(",");
    if (attrs_.declared) {
      text += ";attrs=";
      for (int i = 0; i < attrs_.count; ++i)
        text += (i ? "," : "") + std::string(attrs_.items[i].name) + ":" + std::to_string(attrs_.items[i].kind);
    }
    return text;
  }

 private:
  int inputs_ = 0;
  int outputs_ = 0;
  DtypeSet dtypes_;
  ShapeRule shapes_ = nullptr;
  TypeRule types_ = nullptr;
  int scratch_count_ = 0;
  ScratchRule scratch_ = nullptr;
  bool split_from_attributes_ = false;
  AttrDecls attrs_;
};

}  // namespace ms_ext
