// The only translation unit that talks to MindSpore's AotExtra.
//
// MindSpore 2.10 is built with _GLIBCXX_USE_CXX11_ABI=0 and AotExtra's virtual methods take and return
// std::string / std::vector by value. Torch 2.13 is built with the new ABI, so calling these methods from
// torch-facing code passes a differently laid out std::string: HasAttr answers false and the next call crashes.
// This file is therefore compiled with -D_GLIBCXX_USE_CXX11_ABI=0 (the builder enforces it, and the #error below
// catches a wrong build) and exposes plain C functions (ms_ext/c_api.h) to the rest of the library.
//
// MindSpore's own header (utils/custom_aot_extra.h) pulls in internal headers and cannot be included here, so the
// class is mirrored: same virtual order, same data members, same signatures.

#if !defined(_GLIBCXX_USE_CXX11_ABI) || _GLIBCXX_USE_CXX11_ABI != 0
#error "aot_extra_abi0.cpp must be compiled with -D_GLIBCXX_USE_CXX11_ABI=0 (MindSpore's C++ ABI)"
#endif

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "attr_decode.h"
#include "ms_ext/c_api.h"

namespace mindspore {

class AotKernelData {
 public:
  AotKernelData() = default;
  virtual ~AotKernelData() = default;
};

// Mirror of mindspore::AotExtra (MindSpore 2.10, ccsrc/utils/custom_aot_extra.h). Order matters: the vtable is
// [~AotExtra x2, HasAttr, GetAttrBool, GetAttrInt, GetAttrFloat, GetAttrStr, GetAttrIntVec, GetAttrFloatVec,
//  GetAttrInt2DVec, GetAttrFloat2DVec], followed by the members workspace_ and kernel_data_.
class AotExtra {
 public:
  AotExtra() = default;
  virtual ~AotExtra() = default;
  virtual bool HasAttr(std::string name) = 0;

  void SetWorkSpace(const std::vector<size_t> &workspace) { workspace_ = workspace; }
  const std::vector<size_t> &WorkSpace() const { return workspace_; }
  void SetKernelData(AotKernelData *kernel_data) { kernel_data_ = kernel_data; }
  AotKernelData *KernelData() const { return kernel_data_; }

  // Public here (private in MindSpore's header, where friend-less templates call them): access does not change
  // the layout or the calling convention.
  virtual bool GetAttrBool(std::string name) = 0;
  virtual int64_t GetAttrInt(std::string name) = 0;
  virtual float GetAttrFloat(std::string name) = 0;
  virtual std::string GetAttrStr(std::string name) = 0;
  virtual std::vector<int64_t> GetAttrIntVec(std::string name) = 0;
  virtual std::vector<float> GetAttrFloatVec(std::string name) = 0;
  virtual std::vector<std::vector<int64_t>> GetAttrInt2DVec(std::string name) = 0;
  virtual std::vector<std::vector<float>> GetAttrFloat2DVec(std::string name) = 0;

 private:
  std::vector<size_t> workspace_;
  AotKernelData *kernel_data_{nullptr};
};

}  // namespace mindspore

namespace {

mindspore::AotExtra *as_extra(ms_ext_extra *extra) { return reinterpret_cast<mindspore::AotExtra *>(extra); }

using ms_ext_decode::copy_to_malloc;
using ms_ext_decode::parse_exact_double;
using ms_ext_decode::parse_exact_doubles;

// Whether MindSpore holds the attribute as a string: then a float kind reads the exact text aot_ops wrote.
bool holds_text(mindspore::AotExtra *extra, const std::string &name) {
  try {
    extra->GetAttrStr(name);
    return true;
  } catch (const std::exception &) {
    return false;
  }
}

void read_attr(mindspore::AotExtra *extra, const std::string &name, ms_ext_attr_kind kind, ms_ext_attr_value *out) {
  switch (kind) {
    case MS_EXT_ATTR_BOOL:
      out->bool_value = extra->GetAttrBool(name) ? 1 : 0;
      return;
    case MS_EXT_ATTR_INT:
      out->int_value = extra->GetAttrInt(name);
      return;
    case MS_EXT_ATTR_FLOAT:
      out->float_value = holds_text(extra, name) ? parse_exact_double(extra->GetAttrStr(name))
                                                 : extra->GetAttrFloat(name);
      return;
    case MS_EXT_ATTR_STR: {
      const std::string s = extra->GetAttrStr(name);
      ms_ext_decode::set_str(s.data(), s.size(), out);
      return;
    }
    case MS_EXT_ATTR_INT_LIST: {
      std::vector<int64_t> v = extra->GetAttrIntVec(name);
      out->ints = copy_to_malloc(v.data(), v.size());
      out->count = v.size();
      return;
    }
    case MS_EXT_ATTR_FLOAT_LIST: {
      std::vector<double> v;
      if (holds_text(extra, name)) {
        v = parse_exact_doubles(extra->GetAttrStr(name));
      } else {
        const std::vector<float> f = extra->GetAttrFloatVec(name);
        v.assign(f.begin(), f.end());
      }
      out->floats = copy_to_malloc(v.data(), v.size());
      out->count = v.size();
      return;
    }
    case MS_EXT_ATTR_INT_2D:
      ms_ext_decode::set_2d<int64_t, int64_t>(extra->GetAttrInt2DVec(name), &out->ints, out);
      return;
    case MS_EXT_ATTR_FLOAT_2D:
      ms_ext_decode::set_2d<float, double>(extra->GetAttrFloat2DVec(name), &out->floats, out);
      return;
  }
  throw std::invalid_argument("unknown attribute kind " + std::to_string(static_cast<int>(kind)));
}

// MindSpore reports a wrongly typed or missing attribute with a long multi-line text (its log format). The first
// line is the useful part; ms_ext adds the operator, attribute and expected kind around it.
std::string first_line(const char *text) {
  std::string s(text == nullptr ? "" : text);
  size_t end = s.find('\n');
  return end == std::string::npos ? s : s.substr(0, end);
}

int fail(const std::string &message) {
  ms_ext_set_last_error(message.c_str());
  return -1;
}

}  // namespace

extern "C" {

const char *ms_ext_attr_kind_name(ms_ext_attr_kind kind) {
  switch (kind) {
    case MS_EXT_ATTR_BOOL: return "bool";
    case MS_EXT_ATTR_INT: return "int";
    case MS_EXT_ATTR_FLOAT: return "float";
    case MS_EXT_ATTR_STR: return "str";
    case MS_EXT_ATTR_INT_LIST: return "list of int";
    case MS_EXT_ATTR_FLOAT_LIST: return "list of float";
    case MS_EXT_ATTR_INT_2D: return "list of lists of int";
    case MS_EXT_ATTR_FLOAT_2D: return "list of lists of float";
  }
  return "unknown kind";
}

int ms_ext_extra_has_attr(ms_ext_extra *extra, const char *name) {
  if (extra == nullptr) return 0;  // no extra (e.g. a harness call): no attributes at all
  try {
    return as_extra(extra)->HasAttr(name) ? 1 : 0;
  } catch (const std::exception &e) {
    return fail(first_line(e.what()));
  } catch (...) {
    return fail("unknown exception in AotExtra::HasAttr");
  }
}

int ms_ext_extra_get_attr(ms_ext_extra *extra, const char *name, ms_ext_attr_kind kind, ms_ext_attr_value *out) {
  if (out == nullptr) return fail("ms_ext_extra_get_attr: out is NULL");
  std::memset(out, 0, sizeof(*out));
  out->kind = kind;
  if (extra == nullptr) return fail("the attribute is missing (no attributes were passed to this call)");
  try {
    if (!as_extra(extra)->HasAttr(name)) return fail("the attribute is missing");
    read_attr(as_extra(extra), name, kind, out);
    return 0;
  } catch (const std::exception &e) {
    ms_ext_attr_value_free(out);
    return fail(first_line(e.what()));
  } catch (...) {
    ms_ext_attr_value_free(out);
    return fail("unknown exception while reading the attribute");
  }
}

void ms_ext_attr_value_free(ms_ext_attr_value *value) {
  if (value == nullptr) return;
  std::free(value->str);
  std::free(value->ints);
  std::free(value->floats);
  std::free(value->row_lengths);
  value->str = nullptr;
  value->ints = nullptr;
  value->floats = nullptr;
  value->row_lengths = nullptr;
  value->count = value->rows = 0;
}

int ms_ext_extra_set_workspace(ms_ext_extra *extra, const size_t *bytes, size_t count) {
  if (extra == nullptr) return fail("workspace requested without a MindSpore AotExtra (not inside an Init hook)");
  try {
    as_extra(extra)->SetWorkSpace(std::vector<size_t>(bytes, bytes + count));
    return 0;
  } catch (const std::exception &e) {
    return fail(e.what());
  }
}

int ms_ext_extra_set_kernel_data(ms_ext_extra *extra, void *state) {
  if (extra == nullptr) return fail("kernel state set without a MindSpore AotExtra");
  mindspore::AotExtra *e = as_extra(extra);
  // MindSpore deletes the previous object only when the kernel dies; replacing it here must not leak it.
  delete e->KernelData();
  e->SetKernelData(static_cast<mindspore::AotKernelData *>(state));
  return 0;
}

void *ms_ext_extra_kernel_data(ms_ext_extra *extra) {
  if (extra == nullptr) return nullptr;
  return as_extra(extra)->KernelData();
}

}  // extern "C"
