// What an entry point expects, stated once (in the spirit of XLA FFI's Bind()): ms_ext checks every call against
// it before the kernel body runs, so no kernel re-implements argument checking.
#pragma once

#include <ms_ext/detail/dtype.h>

#include <string>

namespace ms_ext {

class Signature {
 public:
  // Number of input tensors, output tensors and workspace buffers. MindSpore passes them in that order in
  // `params`; `nparam` must equal their sum.
  Signature &inputs(int n) { inputs_ = n; return *this; }
  Signature &outputs(int n) { outputs_ = n; return *this; }
  Signature &workspaces(int n) { workspaces_ = n; return *this; }
  // Scalar types accepted for every input tensor (all types when never called).
  Signature &dtypes(const DtypeSet &allowed) { dtypes_ = allowed; return *this; }

  int num_inputs() const { return inputs_; }
  int num_outputs() const { return outputs_; }
  int num_workspaces() const { return workspaces_; }
  const DtypeSet &input_dtypes() const { return dtypes_; }

  // "inputs=1;outputs=1;workspaces=0;dtypes=float16,float32" (dtypes empty = any). Every MS_EXT_KERNEL exports
  // it as `ms_ext_signature_<NAME>`, so the Python side checks calls with the same rules before MindSpore launches.
  std::string describe() const {
    return "inputs=" + std::to_string(inputs_) + ";outputs=" + std::to_string(outputs_) +
           ";workspaces=" + std::to_string(workspaces_) + ";dtypes=" + dtypes_.to_string(",");
  }

 private:
  int inputs_ = 0;
  int outputs_ = 0;
  int workspaces_ = 0;
  DtypeSet dtypes_;
};

}  // namespace ms_ext
