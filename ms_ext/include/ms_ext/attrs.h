// ms_ext::Attrs: typed access to a Custom primitive's attributes (`op.add_prim_attr(name, value)` in Python).
//
// Reads go through the C interface of ms_ext/src/aot_extra_abi0.cpp, the one translation unit compiled with
// MindSpore's C++ ABI, so this header is safe in torch-facing (new-ABI) code: no std::string crosses. The same
// reads also serve a packed attribute table (Attrs::unpack): many attributes carried in one string attribute.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <ms_ext/c_api.h>

namespace ms_ext {

namespace detail {

template <typename T>
struct AttrKind;  // which MindSpore attribute kind a C++ type reads
template <> struct AttrKind<bool> { static constexpr ms_ext_attr_kind value = MS_EXT_ATTR_BOOL; };
template <> struct AttrKind<int64_t> { static constexpr ms_ext_attr_kind value = MS_EXT_ATTR_INT; };
template <> struct AttrKind<float> { static constexpr ms_ext_attr_kind value = MS_EXT_ATTR_FLOAT; };
template <> struct AttrKind<double> { static constexpr ms_ext_attr_kind value = MS_EXT_ATTR_FLOAT; };
template <> struct AttrKind<std::string> { static constexpr ms_ext_attr_kind value = MS_EXT_ATTR_STR; };
template <> struct AttrKind<std::vector<int64_t>> { static constexpr ms_ext_attr_kind value = MS_EXT_ATTR_INT_LIST; };
template <> struct AttrKind<std::vector<float>> { static constexpr ms_ext_attr_kind value = MS_EXT_ATTR_FLOAT_LIST; };
template <> struct AttrKind<std::vector<double>> { static constexpr ms_ext_attr_kind value = MS_EXT_ATTR_FLOAT_LIST; };
template <> struct AttrKind<std::vector<std::vector<int64_t>>> {
  static constexpr ms_ext_attr_kind value = MS_EXT_ATTR_INT_2D;
};
template <> struct AttrKind<std::vector<std::vector<float>>> {
  static constexpr ms_ext_attr_kind value = MS_EXT_ATTR_FLOAT_2D;
};

// Owns an ms_ext_attr_value and converts it to the requested C++ type.
class AttrValue {
 public:
  AttrValue() = default;
  AttrValue(const AttrValue &) = delete;
  AttrValue &operator=(const AttrValue &) = delete;
  ~AttrValue() { ms_ext_attr_value_free(&raw); }

  void to(bool *out) const { *out = raw.bool_value != 0; }
  void to(int64_t *out) const { *out = raw.int_value; }
  void to(float *out) const { *out = static_cast<float>(raw.float_value); }
  void to(double *out) const { *out = raw.float_value; }
  void to(std::string *out) const { out->assign(raw.str, raw.count); }
  void to(std::vector<int64_t> *out) const { out->assign(raw.ints, raw.ints + raw.count); }
  void to(std::vector<float> *out) const { out->assign(raw.floats, raw.floats + raw.count); }
  void to(std::vector<double> *out) const { out->assign(raw.floats, raw.floats + raw.count); }
  template <typename T>
  void to(std::vector<std::vector<T>> *out) const {
    out->clear();
    for (size_t r = 0, offset = 0; r < raw.rows; offset += raw.row_lengths[r], ++r) {
      if constexpr (std::is_same_v<T, int64_t>) {
        out->emplace_back(raw.ints + offset, raw.ints + offset + raw.row_lengths[r]);
      } else {
        out->emplace_back(raw.floats + offset, raw.floats + offset + raw.row_lengths[r]);
      }
    }
  }

  ms_ext_attr_value raw{};
};

}  // namespace detail

// One attribute a kernel declares in its Signature (`.attr<double>("negative_slope")`): its name and kind.
struct AttrDecl {
  const char *name = nullptr;
  ms_ext_attr_kind kind = MS_EXT_ATTR_BOOL;
};

// The attributes a kernel declared; `declared` false for a kernel that declares none explicitly (reads unchecked).
struct AttrDecls {
  static constexpr int kCapacity = 8;
  AttrDecl items[kCapacity] = {};
  int count = 0;
  bool declared = false;

  const AttrDecl *find(const char *name) const {
    for (int i = 0; i < count; ++i)
      if (std::string(items[i].name) == name) return &items[i];
    return nullptr;
  }
};

class Attrs {
 public:
  // `extra` is what MindSpore passes (its AotExtra), an ms_ext call extra, or NULL (no attributes). Anything else
  // (a C caller's garbage) is refused here, before any attribute is read through it: every entry point reads its
  // attributes through an Attrs first, so each names the operator in that error.
  explicit Attrs(void *extra) : extra_(static_cast<ms_ext_extra *>(extra)) {
    if (ms_ext_extra_check(extra_) != 0) throw std::invalid_argument(ms_ext_last_error());
  }

  // The attributes packed in `text` (one string attribute written by aot_ops/_core/packed_attrs.py): MindSpore converts
  // every attribute on every PyNative call, so a kernel with hundreds of them (a program) carries them as one.
  static Attrs unpack(const std::string &text) {
    ms_ext_attr_table *table = ms_ext_attr_table_parse(text.data(), text.size());
    if (table == nullptr) throw std::invalid_argument(ms_ext_last_error());
    Attrs out(nullptr);
    out.table_ = std::shared_ptr<const ms_ext_attr_table>(table, [](const ms_ext_attr_table *t) {
      ms_ext_attr_table_free(const_cast<ms_ext_attr_table *>(t));
    });
    return out;
  }

  // These attributes as the kernel's state reads them: every read must be of an attribute `decls` declares,
  // with the declared kind, so the signature aot_ops checks users' attributes against is the one the kernel uses.
  Attrs declared_by(const AttrDecls &decls) const {
    Attrs checked(*this);
    if (decls.declared) checked.decls_ = &decls;
    return checked;
  }

  // The attributes whose names start with `prefix`, read without it: one primitive carrying the attributes of
  // several parts (the program entry's nodes: "n3_aten_op" is node 3's "aten_op").
  Attrs prefixed(const std::string &prefix) const {
    Attrs part(*this);
    part.prefix_ = prefix_ + prefix;
    return part;
  }

  bool has(const char *name) const {
    check_declared(name, nullptr);
    const std::string full = prefix_ + name;
    const int found = table_ ? ms_ext_attr_table_has(table_.get(), full.c_str())
                             : ms_ext_extra_has_attr(extra_, full.c_str());
    if (found < 0) throw std::runtime_error(std::string("attribute '") + name + "': " + ms_ext_last_error());
    return found == 1;
  }

  // The attribute's value as T (bool, int64_t, float/double, std::string, std::vector<int64_t>,
  // std::vector<float/double>, or 2-D vectors of int64_t/float). A missing attribute, or one of another kind,
  // is an error naming the attribute and the expected kind. Floats set through aot_ops arrive as exact doubles
  // (see ms_ext_attr_value in c_api.h); floats set by hand with add_prim_attr are MindSpore's float32.
  template <typename T>
  T get(const char *name) const {
    constexpr ms_ext_attr_kind kind = detail::AttrKind<T>::value;
    check_declared(name, &kind);
    detail::AttrValue value;
    const std::string full = prefix_ + name;
    const int status = table_ ? ms_ext_attr_table_get(table_.get(), full.c_str(), kind, &value.raw)
                              : ms_ext_extra_get_attr(extra_, full.c_str(), kind, &value.raw);
    if (status != 0) {
      throw std::invalid_argument(std::string("attribute '") + full + "' (expected " +
                                  ms_ext_attr_kind_name(kind) + "): " + ms_ext_last_error());
    }
    T out{};
    value.to(&out);
    return out;
  }

  // The attribute's value, or `fallback` when the primitive does not carry it.
  template <typename T>
  T get(const char *name, T fallback) const {
    return has(name) ? get<T>(name) : fallback;
  }

 private:
  // A read of an undeclared attribute is the kernel author's mistake, reported as such (not as a user error).
  void check_declared(const char *name, const ms_ext_attr_kind *kind) const {
    if (decls_ == nullptr) return;
    const AttrDecl *decl = decls_->find(name);
    if (decl == nullptr)
      throw std::logic_error(std::string("the kernel reads attribute '") + name +
                             "', which its Signature does not declare (add .attr<T>(\"" + name + "\"))");
    if (kind != nullptr && decl->kind != *kind)
      throw std::logic_error(std::string("the kernel reads attribute '") + name + "' as " +
                             ms_ext_attr_kind_name(*kind) + ", but its Signature declares it " +
                             ms_ext_attr_kind_name(decl->kind));
  }

  ms_ext_extra *extra_;
  std::shared_ptr<const ms_ext_attr_table> table_;  // set: read the table instead of MindSpore's attributes
  const AttrDecls *decls_ = nullptr;
  std::string prefix_;
};

}  // namespace ms_ext
