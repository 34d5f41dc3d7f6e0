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

#include <link.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
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

// ---- telling an AotExtra from garbage ----------------------------------------------------------------------
// MindSpore always passes a live AotExtra (or, from aot_ops, an ms_ext call extra); a C caller may pass anything,
// and calling a virtual function of zeroed memory jumps to address 0. Before any use, ms_ext_extra_check looks at
// the object from outside, without following a pointer it has not found mapped: the first word must be the call
// extra's magic or a vtable pointer, and that vtable must be a complete object's (offset-to-top 0) whose every
// function lies in the code of a loaded library, as MindSpore's AotExtraImpl's do.

constexpr uintptr_t kLowestMapping = 65536;              // Linux maps nothing below vm.mmap_min_addr (64 KiB)
constexpr uintptr_t kAddressLimit = uintptr_t{1} << 56;  // above every user-space address (57-bit paging too)
constexpr size_t kVtableSlots = 11;                      // the mirror's virtual functions (the destructor twice)

bool plausible_address(uintptr_t p) { return p >= kLowestMapping && p < kAddressLimit; }

// Keys already found valid, so that the system calls behind a check run once per page or vtable rather than on
// every launch (a mapping check costs about 2 us on this project's machines, a whole launch 35 us). Direct-mapped
// and lock-free: a collision only costs a recheck. A page unmapped after it was seen is not noticed, which only
// a use after free can cause, and no check here can catch that.
template <size_t N>
class SeenSet {
 public:
  bool contains(uintptr_t key) const { return slots_[slot(key)].load(std::memory_order_relaxed) == key; }
  void insert(uintptr_t key) { slots_[slot(key)].store(key, std::memory_order_relaxed); }

 private:
  static size_t slot(uintptr_t key) { return static_cast<size_t>((key >> 12) ^ (key >> 4)) % N; }
  std::atomic<uintptr_t> slots_[N] = {};
};

SeenSet<64> g_mapped_pages;
SeenSet<8> g_valid_vtables;

// Whether [address, address + bytes) is mapped, page by page (the pages seen before are not asked again).
bool readable(uintptr_t address, size_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  for (uintptr_t at = address & ~(page - 1); at < address + bytes; at += page) {
    if (g_mapped_pages.contains(at)) continue;
    if (!ms_ext_mapped(reinterpret_cast<const void *>(at), page)) return false;
    g_mapped_pages.insert(at);
  }
  return true;
}

// Whether every one of `count` addresses lies in an executable segment of a loaded object.
bool all_in_code(const uintptr_t *addresses, size_t count) {
  struct Search {
    const uintptr_t *addresses;
    size_t count;
    uint32_t found;  // bit i: addresses[i] was found
  } search{addresses, count, 0};
  const auto visit = [](dl_phdr_info *info, size_t, void *data) -> int {
    auto *s = static_cast<Search *>(data);
    for (int k = 0; k < info->dlpi_phnum; ++k) {
      const ElfW(Phdr) &segment = info->dlpi_phdr[k];
      if (segment.p_type != PT_LOAD || (segment.p_flags & PF_X) == 0) continue;
      const uintptr_t low = info->dlpi_addr + segment.p_vaddr, high = low + segment.p_memsz;
      for (size_t i = 0; i < s->count; ++i)
        if (s->addresses[i] >= low && s->addresses[i] < high) s->found |= uint32_t{1} << i;
    }
    return s->found == (uint32_t{1} << s->count) - 1 ? 1 : 0;  // non-zero stops the walk
  };
  dl_iterate_phdr(visit, &search);
  return search.found == (uint32_t{1} << count) - 1;
}

// Why the vtable at `vptr` is not an AotExtra's (nullptr when it can be).
const char *vtable_fault(uintptr_t vptr) {
  if (g_valid_vtables.contains(vptr)) return nullptr;
  if (!plausible_address(vptr) || vptr % alignof(void *) != 0)
    return "its first word, where an AotExtra holds its vtable pointer, is no address a vtable can have";
  const uintptr_t *slots = reinterpret_cast<const uintptr_t *>(vptr);
  if (!readable(vptr - 2 * sizeof(uintptr_t), (kVtableSlots + 2) * sizeof(uintptr_t)))
    return "its first word, where an AotExtra holds its vtable pointer, points at unmapped memory";
  if (slots[-2] != 0) return "what its first word points at is not a vtable (its offset-to-top is not 0)";
  if (!all_in_code(slots, kVtableSlots))
    return "what its first word points at is not a vtable (its entries do not all point into loaded code)";
  g_valid_vtables.insert(vptr);
  return nullptr;
}

// Why `extra` (not NULL) is neither an AotExtra nor a call extra (nullptr when it can be one).
const char *extra_fault(const void *extra) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(extra);
  if (!plausible_address(at) || at % alignof(void *) != 0) return "no object can be at that address";
  if (!readable(at, sizeof(uint64_t))) return "it points at unmapped memory";
  const uint64_t first = *static_cast<const uint64_t *>(extra);
  if (first == MS_EXT_CALL_EXTRA_MAGIC) return nullptr;
  if (first == 0) return "its first word, where an AotExtra holds its vtable pointer, is 0 (zeroed memory?)";
  if (!readable(at, sizeof(mindspore::AotExtra))) return "it ends in unmapped memory";
  return vtable_fault(static_cast<uintptr_t>(first));
}

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

int ms_ext_extra_check(ms_ext_extra *extra) {
  if (extra == nullptr) return 0;  // no extra: a call without attributes
  const char *fault = extra_fault(extra);
  if (fault == nullptr) return 0;
  char text[256];
  std::snprintf(text, sizeof(text), "the extra argument (%p) is not MindSpore's AotExtra: %s",
                static_cast<void *>(extra), fault);
  return fail(text);
}

int ms_ext_extra_has_attr(ms_ext_extra *extra, const char *name) {
  if (extra == nullptr) return 0;  // no extra (e.g. a harness call): no attributes at all
  if (ms_ext_extra_check(extra) != 0) return -1;
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
  if (ms_ext_extra_check(extra) != 0) return -1;
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
  if (bytes == nullptr && count != 0) return fail("workspace sizes are NULL");
  if (ms_ext_extra_check(extra) != 0) return -1;
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
  if (ms_ext_extra_check(extra) != 0) return -1;
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
  if (extra == nullptr || ms_ext_extra_check(extra) != 0) return nullptr;
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
  if (extra == nullptr || ms_ext_extra_check(reinterpret_cast<ms_ext_extra *>(extra)) != 0 ||
      extra->magic != MS_EXT_CALL_EXTRA_MAGIC)
    return;
  delete extra->kernel_data;  // as MindSpore deletes a kernel's data with the kernel
  ms_ext_attr_table_free(extra->table);
  extra->magic = 0;
  delete extra;
}

size_t ms_ext_call_extra_workspace(const ms_ext_call_extra *extra, size_t *bytes, size_t capacity) {
  auto *any = reinterpret_cast<ms_ext_extra *>(const_cast<ms_ext_call_extra *>(extra));
  if (extra == nullptr || ms_ext_extra_check(any) != 0 || extra->magic != MS_EXT_CALL_EXTRA_MAGIC) return 0;
  if (bytes == nullptr) capacity = 0;
  for (size_t i = 0; i < extra->workspace.size() && i < capacity; ++i) bytes[i] = extra->workspace[i];
  return extra->workspace.size();
}

}  // extern "C"
