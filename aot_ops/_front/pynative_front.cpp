// The PyNative fast front: launches an ms_ext entry point through MindSpore's PyBoost pipeline.
//
// An `ops.Custom` call in PyNative spends 30-100 us in the Custom primitive's Python path before any work. This
// module is built with MindSpore's CustomOpBuilder (CPU backend): a call goes straight into MindSpore's
// asynchronous op pipeline (PyboostRunner), as a built-in operator does. Per call, on MindSpore's frontend thread:
// inputs are made contiguous (the runner does not do it on CPU), output shapes come from the kernel's C++
// InferShape (or from Python), outputs are allocated, and the launch is queued for MindSpore's device stage,
// where it calls the kernel's entry point with the seven arguments MindSpore's aot path would pass.
//
// Only C types cross into the kernel library: this module is built with MindSpore's C++ ABI
// (_GLIBCXX_USE_CXX11_ABI=0), kernel libraries with torch's. Attributes travel in an ms_ext call extra
// (ms_ext/c_api.h: a packed attribute table and the state the kernel's Init hook keeps), not in MindSpore's
// AotExtra. Errors name the operator: the kernel's own text (ms_ext_last_error) surfaces as a RuntimeError when
// the result is read, as MindSpore's own operators report failures in the asynchronous pipeline.
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "ms_extension/api.h"

namespace {

using mindspore::TypeId;

// The C interface of an ms_ext library (ms_ext/c_api.h and the MS_EXT_KERNEL entry points).
using EntryFn = int (*)(int, void **, int *, int64_t **, const char **, void *, void *);
using GuardedCallFn = int (*)(void *, int, void **, int *, int64_t **, const char **, void *, void *);
using InitFn = int (*)(int *, int64_t **, const char **, void *);
using InferOneFn = std::vector<int64_t> (*)(int *, int64_t **, void *);
using InferManyFn = std::vector<std::vector<int64_t>> (*)(int *, int64_t **, void *);
using LastErrorFn = const char *(*)();
using ExtraNewFn = void *(*)(const char *, size_t);
using ExtraFreeFn = void (*)(void *);
using ExtraWorkspaceFn = size_t (*)(const void *, size_t *, size_t);

constexpr size_t kWorkspaceAlignment = 64;

// MindSpore's dtype names, as its aot path passes them to kernels.
struct DtypeName {
  TypeId id;
  const char *name;
};
constexpr DtypeName kDtypeNames[] = {
    {mindspore::kNumberTypeBool, "bool"},           {mindspore::kNumberTypeInt8, "int8"},
    {mindspore::kNumberTypeInt16, "int16"},         {mindspore::kNumberTypeInt32, "int32"},
    {mindspore::kNumberTypeInt64, "int64"},         {mindspore::kNumberTypeUInt8, "uint8"},
    {mindspore::kNumberTypeUInt16, "uint16"},       {mindspore::kNumberTypeUInt32, "uint32"},
    {mindspore::kNumberTypeUInt64, "uint64"},       {mindspore::kNumberTypeFloat16, "float16"},
    {mindspore::kNumberTypeFloat32, "float32"},     {mindspore::kNumberTypeFloat64, "float64"},
    {mindspore::kNumberTypeBFloat16, "bfloat16"},   {mindspore::kNumberTypeComplex64, "complex64"},
    {mindspore::kNumberTypeComplex128, "complex128"},
};

const char *dtype_name(TypeId id) {
  for (const auto &d : kDtypeNames)
    if (d.id == id) return d.name;
  return "unknown";
}

std::atomic<int64_t> g_launches{0};

template <typename F>
F symbol(void *handle, const std::string &name) {
  return reinterpret_cast<F>(dlsym(handle, name.c_str()));
}

// Ranks and shapes as MindSpore passes them: a 0-dim tensor has a NULL shape.
struct ShapeArrays {
  std::vector<int> ndims;
  std::vector<int64_t *> shapes;
  std::vector<const char *> dtypes;
  std::vector<std::vector<int64_t>> storage;

  void add(const std::vector<int64_t> &shape, const char *dtype) {
    storage.push_back(shape);
    ndims.push_back(static_cast<int>(shape.size()));
    dtypes.push_back(dtype);
  }
  void add_none() {
    storage.emplace_back();
    ndims.push_back(0);
    dtypes.push_back("none");
  }
  void finish() {
    shapes.clear();
    for (auto &s : storage) shapes.push_back(s.empty() ? nullptr : s.data());
  }
};

// One operator configuration: the kernel's entry points and the call extra holding its attributes and the state
// its Init hook made. Shared by every call of the operator; launches run one at a time on MindSpore's device
// thread, and the Init state is read-only there.
class Kernel : public std::enable_shared_from_this<Kernel> {
 public:
  Kernel(const std::string &library, const std::string &symbol_name, std::string display_name, std::string packed,
         int num_outputs, bool cpp_shapes)
      : name_(symbol_name), display_name_(std::move(display_name)), packed_(std::move(packed)),
        num_outputs_(num_outputs), cpp_shapes_(cpp_shapes) {
    // The library is already loaded (aot_ops opened it to read its signature): dlopen returns the same handle.
    handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) throw std::runtime_error(name_ + ": cannot open " + library + ": " + dlerror());
    entry_ = symbol<void *>(handle_, name_);
    guarded_call_ = symbol<GuardedCallFn>(handle_, "ms_ext_guarded_call");
    init_ = symbol<InitFn>(handle_, name_ + "Init");
    infer_ = symbol<void *>(handle_, name_ + "InferShape");
    last_error_ = symbol<LastErrorFn>(handle_, "ms_ext_last_error");
    extra_new_ = symbol<ExtraNewFn>(handle_, "ms_ext_call_extra_new");
    extra_free_ = symbol<ExtraFreeFn>(handle_, "ms_ext_call_extra_free");
    extra_workspace_ = symbol<ExtraWorkspaceFn>(handle_, "ms_ext_call_extra_workspace");
    if (entry_ == nullptr || guarded_call_ == nullptr || last_error_ == nullptr || extra_new_ == nullptr ||
        extra_free_ == nullptr || extra_workspace_ == nullptr)
      throw std::runtime_error(name_ + ": " + library + " is not an ms_ext library with call extras");
    if (cpp_shapes_ && infer_ == nullptr) throw std::runtime_error(name_ + ": the kernel has no C++ InferShape");
    if (num_outputs_ < 1) throw std::runtime_error(name_ + ": an operator without outputs cannot run on the front");
    extra_ = new_extra();
  }

  ~Kernel() {
    if (extra_ != nullptr) extra_free_(extra_);
    if (handle_ != nullptr) dlclose(handle_);
  }

  const std::string &name() const { return name_; }
  int num_outputs() const { return num_outputs_; }

  // The frontend-thread part of a call: contiguous inputs, output tensors, Init, and the launch queued.
  std::vector<ms::Tensor> run(const std::vector<std::optional<ms::Tensor>> &raw_inputs,
                              const std::vector<int64_t> &out_types,
                              const std::optional<std::vector<std::vector<int64_t>>> &given_shapes);

  // The device-stage part: the entry point called with MindSpore's seven arguments.
  void launch(const std::vector<std::optional<ms::Tensor>> &inputs, const std::vector<ms::Tensor> &outputs,
              void *extra, const std::vector<size_t> &workspace, void *workspace_ptr, void *stream) const {
    ShapeArrays arrays;
    std::vector<void *> params;
    for (const auto &t : inputs) {
      if (t.has_value()) {
        arrays.add(t->shape(), dtype_name(t->data_type()));
        params.push_back(t->GetDataPtr());
      } else {
        arrays.add_none();
        params.push_back(nullptr);
      }
    }
    for (const auto &t : outputs) {
      arrays.add(t.shape(), dtype_name(t.data_type()));
      params.push_back(t.GetDataPtr());
    }
    arrays.finish();
    auto *block = static_cast<char *>(workspace_ptr);
    for (size_t bytes : workspace) {
      params.push_back(block);
      block += aligned(bytes);
    }
    g_launches.fetch_add(1, std::memory_order_relaxed);
    if (guarded_call_(entry_, static_cast<int>(params.size()), params.data(), arrays.ndims.data(),
                      arrays.shapes.data(), arrays.dtypes.data(), stream, extra) != 0)
      throw std::runtime_error(error_text());
  }

  void free_extra(void *extra) const { extra_free_(extra); }

  static size_t aligned(size_t bytes) { return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment; }

 private:
  void *new_extra() const {
    void *extra = extra_new_(packed_.data(), packed_.size());
    if (extra == nullptr) throw std::runtime_error(error_text());
    return extra;
  }

  // The kernel's last error, named: ms_ext entry points already begin with "<symbol>: ", the generic ATen entry
  // with the ATen operator's name.
  std::string error_text() const { return named(last_error_()); }

  std::string named(std::string text) const {
    if (text.empty()) text = "failed without a message";
    if (text.rfind(name_ + ":", 0) == 0 || text.rfind(display_name_ + ":", 0) == 0) return text;
    return display_name_ + ": " + text;
  }

  std::vector<std::vector<int64_t>> infer_shapes(ShapeArrays &inputs) const {
    inputs.finish();
    try {
      if (num_outputs_ == 1)
        return {reinterpret_cast<InferOneFn>(infer_)(inputs.ndims.data(), inputs.shapes.data(), extra_)};
      return reinterpret_cast<InferManyFn>(infer_)(inputs.ndims.data(), inputs.shapes.data(), extra_);
    } catch (const std::exception &e) {  // ms_ext's InferShape throws "<name>: cause", as MindSpore expects
      throw std::runtime_error(named(e.what()));
    }
  }

  // Runs Init on `extra` with the call's ranks, shapes and dtypes (inputs, then outputs), as MindSpore does.
  std::vector<size_t> init(void *extra, ShapeArrays arrays, const std::vector<ms::Tensor> &outputs) const {
    for (const auto &o : outputs) arrays.add(o.shape(), dtype_name(o.data_type()));
    arrays.finish();
    if (init_(arrays.ndims.data(), arrays.shapes.data(), arrays.dtypes.data(), extra) != 0)
      throw std::runtime_error(error_text());
    std::vector<size_t> sizes(extra_workspace_(extra, nullptr, 0));
    extra_workspace_(extra, sizes.data(), sizes.size());
    return sizes;
  }

  std::string name_;
  std::string display_name_;  // what errors call the operator (an ATen operator's name for the generic entry)
  std::string packed_;
  int num_outputs_;
  bool cpp_shapes_;
  void *handle_ = nullptr;
  void *entry_ = nullptr;
  GuardedCallFn guarded_call_ = nullptr;
  InitFn init_ = nullptr;
  void *infer_ = nullptr;
  LastErrorFn last_error_ = nullptr;
  ExtraNewFn extra_new_ = nullptr;
  ExtraFreeFn extra_free_ = nullptr;
  ExtraWorkspaceFn extra_workspace_ = nullptr;
  void *extra_ = nullptr;
  // Init runs once per operator, on its first call. A kernel whose Init asks for scratch buffers sized from the
  // shapes gets a call extra of its own on every call instead (its sizes follow each call's shapes, and a queued
  // launch keeps its own state).
  std::once_flag init_once_;
  bool per_call_init_ = false;
};

class Runner : public ms::pynative::PyboostRunner {
 public:
  Runner(std::shared_ptr<const Kernel> kernel, std::vector<std::optional<ms::Tensor>> inputs, void *extra,
         bool owns_extra, std::vector<size_t> workspace)
      : PyboostRunner(kernel->name()), kernel_(std::move(kernel)), args_(std::move(inputs)), extra_(extra),
        owns_extra_(owns_extra), workspace_(std::move(workspace)) {}
  ~Runner() override {
    if (owns_extra_) kernel_->free_extra(extra_);
  }
  size_t CalcWorkspace() override {
    size_t total = 0;
    for (size_t bytes : workspace_) total += Kernel::aligned(bytes);
    return total;
  }
  void LaunchKernel() override { kernel_->launch(args_, outputs(), extra_, workspace_, workspace_ptr(), stream()); }

 protected:
  // The runner's default hands the launch to MindSpore's launch thread, which built-in CPU operators do not wait
  // for: a built-in operator's first call read a front output before it was written (zeros, stale values). The
  // launch runs here instead, in the device stage, in order with every other operator.
  void _DispatchLaunchTask() override { LaunchKernel(); }

 private:
  std::shared_ptr<const Kernel> kernel_;
  std::vector<std::optional<ms::Tensor>> args_;
  void *extra_;
  bool owns_extra_;
  std::vector<size_t> workspace_;
};

std::vector<ms::Tensor> Kernel::run(const std::vector<std::optional<ms::Tensor>> &raw_inputs,
                                    const std::vector<int64_t> &out_types,
                                    const std::optional<std::vector<std::vector<int64_t>>> &given_shapes) {
  std::vector<std::optional<ms::Tensor>> inputs;
  std::vector<ms::Tensor> defined;
  ShapeArrays arrays;
  for (const auto &t : raw_inputs) {
    if (!t.has_value()) {
      inputs.emplace_back();
      arrays.add_none();
      continue;
    }
    ms::Tensor c = t->is_contiguous() ? *t : t->contiguous();
    arrays.add(c.shape(), dtype_name(c.data_type()));
    defined.push_back(c);
    inputs.emplace_back(std::move(c));
  }
  const std::vector<std::vector<int64_t>> shapes = given_shapes.has_value() ? *given_shapes : infer_shapes(arrays);
  if (static_cast<int>(shapes.size()) != num_outputs_ || static_cast<int>(out_types.size()) != num_outputs_)
    throw std::runtime_error(name_ + ": " + std::to_string(shapes.size()) + " output shapes and " +
                             std::to_string(out_types.size()) + " dtypes for " + std::to_string(num_outputs_) +
                             " outputs");
  std::vector<ms::Tensor> outputs;
  for (int i = 0; i < num_outputs_; ++i) outputs.emplace_back(static_cast<TypeId>(out_types[i]), shapes[i]);

  void *extra = extra_;
  bool owns_extra = false;
  std::vector<size_t> workspace;
  if (init_ != nullptr) {
    std::call_once(init_once_, [&] { per_call_init_ = !init(extra_, arrays, outputs).empty(); });
    if (per_call_init_) {
      extra = new_extra();
      owns_extra = true;
      try {
        workspace = init(extra, arrays, outputs);
      } catch (...) {
        free_extra(extra);
        throw;
      }
    }
  }
  auto runner =
      std::make_shared<Runner>(shared_from_this(), std::move(inputs), extra, owns_extra, std::move(workspace));
  runner->Run(defined, outputs);
  return outputs;
}

}  // namespace

namespace {

using Inputs = std::vector<std::optional<ms::Tensor>>;
using Shapes = std::optional<std::vector<std::vector<int64_t>>>;

// What PyboostRunner::Call<N> does, for any number of outputs (Call<N> fixes it at compile time; MindSpore's
// vector forms of its helpers take it at run time), with one difference: a failure in the frontend task (a shape
// error, a failed Init) is kept in the outputs alone and raised when they are read. Call<N> also lets it reach
// MindSpore's queue, which raised it a second time, now and then, at the next synchronisation: the operator's next,
// valid, call failed with the previous call's error.
py::object dispatch(const std::shared_ptr<Kernel> &kernel, const Inputs &inputs, const std::vector<int64_t> &types,
                    const Shapes &shapes) {
  mindspore::runtime::ProfilerRecorder profiler(mindspore::runtime::ProfilerModule::kPynative,
                                                mindspore::runtime::ProfilerEvent::kRunOp, kernel->name());
  auto py_output = mindspore::tensor::MakeVector<false>(static_cast<size_t>(kernel->num_outputs()));
  auto promises = mindspore::tensor::TransformVectorPromise(py_output);
  mindspore::pynative::DispatchOp(std::make_shared<mindspore::pynative::PassthroughFrontendTask>(
      [=]() {
        try {
          ms::inner::ConvertStubNodeToTensor(inputs);
          std::vector<mindspore::tensor::TensorPtr> outputs;
          for (const ms::Tensor &t : kernel->run(inputs, types, shapes)) outputs.push_back(t.tensor());
          mindspore::tensor::SetPromise(promises, outputs);
        } catch (...) {
          mindspore::tensor::SetException(promises);
        }
      },
      [promises]() { mindspore::tensor::SetException(promises); }));
  // One output is returned as the tensor itself, several as a tuple (as ops.Custom does).
  if (py_output.size() == 1) return py::reinterpret_steal<py::object>(py_output[0].value());
  return py::reinterpret_steal<py::object>(mindspore::tensor::TransformVectorOutput(py_output));
}

// What Python holds for one operator configuration.
class FrontKernel {
 public:
  FrontKernel(const std::string &library, const std::string &symbol_name, const std::string &display_name,
              const py::bytes &packed, int num_outputs, bool cpp_shapes)
      : kernel_(std::make_shared<Kernel>(library, symbol_name, display_name, std::string(packed), num_outputs,
                                         cpp_shapes)) {}

  // One call: `inputs` as the kernel takes them (None for an absent optional tensor), the outputs' MindSpore type
  // ids, and their shapes when Python inferred them (None: the kernel's C++ InferShape runs). Returns a Tensor for
  // one output, a tuple for several, as ops.Custom does.
  py::object call(const Inputs &inputs, const std::vector<int64_t> &types, const Shapes &shapes) const {
    return dispatch(kernel_, inputs, types, shapes);
  }

 private:
  std::shared_ptr<Kernel> kernel_;
};

}  // namespace

PYBIND11_MODULE(MS_EXTENSION_NAME, m) {
  m.doc() = "aot_ops' PyNative fast front (see aot_ops/_front/__init__.py)";
  py::class_<FrontKernel>(m, "FrontKernel")
      .def(py::init<const std::string &, const std::string &, const std::string &, const py::bytes &, int, bool>(),
           py::arg("library"), py::arg("symbol"), py::arg("display_name"), py::arg("packed_attrs"),
           py::arg("num_outputs"), py::arg("cpp_shapes"))
      .def("__call__", &FrontKernel::call, py::arg("inputs"), py::arg("out_types"), py::arg("out_shapes"));
  m.def("type_ids", [] {
    py::dict ids;
    for (const auto &d : kDtypeNames) ids[d.name] = static_cast<int64_t>(d.id);
    return ids;
  }, "MindSpore's type id of each dtype name the front passes to kernels");
  m.def("launches", [] { return g_launches.load(); }, "entry points launched through the front in this process");
}
