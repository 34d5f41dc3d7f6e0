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
#include "c_boundary.h"
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

}  // namespace

// An `extra` made by ms_ext itself for calls that do not come from MindSpore (c_api.h). Its first word is a magic
// number where an AotExtra has its vtable pointer (a user-space address, which the magic can never be).
struct ms_ext_call_extra {
  uint64_t magic = MS_EXT_CALL_EXTRA_MAGIC;
  ms_ext_attr_table *table = nullptr;
  mindspore::AotKernelData *kernel_data = nullptr;
  std::vector<size_t> workspace;
};

namespace {

ms_ext_call_extra *as_call_extra(ms_ext_extra *extra) {
  auto *own = reinterpret_cast<ms_ext_call_extra *>(extra);
  return own != nullptr && own->magic == MS_EXT_CALL_EXTRA_MAGIC ? own : nullptr;
}

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
  if (ms_ext_call_extra *own = as_call_extra(extra)) return ms_ext_attr_table_has(own->table, name);
  return ms_ext_c::at_c_boundary([&] { return as_extra(extra)->HasAttr(name) ? 1 : 0; },
                                 [](const char *text) { return fail(first_line(text)); },
                                 "unknown exception in AotExtra::HasAttr");
}

int ms_ext_extra_get_attr(ms_ext_extra *extra, const char *name, ms_ext_attr_kind kind, ms_ext_attr_value *out) {
  if (out == nullptr) return fail("ms_ext_extra_get_attr: out is NULL");
  std::memset(out, 0, sizeof(*out));
  out->kind = kind;
  if (extra == nullptr) return fail("the attribute is missing (no attributes were passed to this call)");
  if (ms_ext_call_extra *own = as_call_extra(extra)) return ms_ext_attr_table_get(own->table, name, kind, out);
  return ms_ext_c::at_c_boundary(
      [&] {
        if (!as_extra(extra)->HasAttr(name)) return fail("the attribute is missing");
        read_attr(as_extra(extra), name, kind, out);
        return 0;
      },
      [out](const char *text) {
        ms_ext_attr_value_free(out);  // no half-filled value reaches the caller
        return fail(first_line(text));
      },
      "unknown exception while reading the attribute");
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
  if (ms_ext_call_extra *own = as_call_extra(extra)) {
    own->workspace.assign(bytes, bytes + count);
    return 0;
  }
  return ms_ext_c::at_c_boundary(
      [&] {
        as_extra(extra)->SetWorkSpace(std::vector<size_t>(bytes, bytes + count));
        return 0;
      },
      [](const char *text) { return fail(text); });
}

int ms_ext_extra_set_kernel_data(ms_ext_extra *extra, void *state) {
  if (extra == nullptr) return fail("kernel state set without a MindSpore AotExtra");
  if (ms_ext_call_extra *own = as_call_extra(extra)) {
    delete own->kernel_data;
    own->kernel_data = static_cast<mindspore::AotKernelData *>(state);
    return 0;
  }
  mindspore::AotExtra *e = as_extra(extra);
  // MindSpore deletes the previous object only when the kernel dies; replacing it here must not leak it.
  delete e->KernelData();
  e->SetKernelData(static_cast<mindspore::AotKernelData *>(state));
  return 0;
}

void *ms_ext_extra_kernel_data(ms_ext_extra *extra) {
  if (extra == nullptr) return nullptr;
  if (ms_ext_call_extra *own = as_call_extra(extra)) return own->kernel_data;
  return as_extra(extra)->KernelData();
}

ms_ext_call_extra *ms_ext_call_extra_new(const char *packed, size_t size) {
  ms_ext_attr_table *table = ms_ext_attr_table_parse(packed, size);
  if (table == nullptr) return nullptr;  // the cause is the last error
  auto *own = new (std::nothrow) ms_ext_call_extra();
  if (own == nullptr) {
    ms_ext_attr_table_free(table);
    fail("out of memory");
    return nullptr;
  }
  own->table = table;
  return own;
}

void ms_ext_call_extra_free(ms_ext_call_extra *extra) {
  if (extra == nullptr || extra->magic != MS_EXT_CALL_EXTRA_MAGIC) return;
  delete extra->kernel_data;  // as MindSpore deletes a kernel's data with the kernel
  ms_ext_attr_table_free(extra->table);
  extra->magic = 0;
  delete extra;
}

size_t ms_ext_call_extra_workspace(const ms_ext_call_extra *extra, size_t *bytes, size_t capacity) {
  if (extra == nullptr) return 0;
  for (size_t i = 0; i < extra->workspace.size() && i < capacity; ++i) bytes[i] = extra->workspace[i];
  return extra->workspace.size();
}

}  // extern "C"
