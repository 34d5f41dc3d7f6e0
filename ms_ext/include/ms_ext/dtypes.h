// MindSpore's dtype names <-> torch scalar types, and the dtype sets a kernel's Signature accepts.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace ms_ext {

// The one dtype table of ms_ext: the names MindSpore 2.10 sends to an aot launch function, which are also how
// dtypes cross ms_ext's own C interfaces (a kernel's dtype rule, the Ascend C torch entries), so no numeric code
// has to agree between C++ and Python. aot_ops/_core/dtypes.py holds the same 15 names. The aliases MindSpore's
// documentation lists follow C: "float" is float32, "int" int32, "uint" uint32; they are read, never written.
struct MsDtype {
  const char *name;
  at::ScalarType type;
};
inline constexpr int kNumMsDtypes = 15;
inline constexpr MsDtype kMsDtypes[] = {
    {"float16", at::kHalf},         {"float32", at::kFloat},          {"float64", at::kDouble},
    {"bfloat16", at::kBFloat16},    {"int8", at::kChar},              {"int16", at::kShort},
    {"int32", at::kInt},            {"int64", at::kLong},             {"uint8", at::kByte},
    {"uint16", at::kUInt16},        {"uint32", at::kUInt32},          {"uint64", at::kUInt64},
    {"bool", at::kBool},            {"complex64", at::kComplexFloat}, {"complex128", at::kComplexDouble},
    // aliases (after the 15 names, so ms_dtype_name never returns one)
    {"float", at::kFloat},          {"int", at::kInt},                {"uint", at::kUInt32},
};

// A MindSpore dtype string as a torch scalar type. Any other string is an error: guessing a dtype would make ATen
// read or write past the buffer (a 1-byte bool read as a 4-byte float).
inline at::ScalarType scalar_type_from_ms(const char *dtype) {
  if (dtype != nullptr) {
    for (const MsDtype &d : kMsDtypes) {
      if (std::strcmp(dtype, d.name) == 0) return d.type;
    }
  }
  std::string known;
  for (int i = 0; i < kNumMsDtypes; ++i) known += (i ? ", " : "") + std::string(kMsDtypes[i].name);
  throw std::invalid_argument(std::string("unsupported dtype string '") + (dtype ? dtype : "(null)") +
                              "' (MindSpore sends " + known + ")");
}

// MindSpore's name of a torch scalar type (every error message uses it), nullptr when MindSpore has none.
inline const char *ms_dtype_name_or_null(at::ScalarType type) {
  for (int i = 0; i < kNumMsDtypes; ++i) {
    if (kMsDtypes[i].type == type) return kMsDtypes[i].name;
  }
  return nullptr;
}

// The name MindSpore users know for a torch scalar type; torch's own name for one MindSpore lacks.
inline const char *ms_dtype_name(at::ScalarType type) {
  const char *name = ms_dtype_name_or_null(type);
  return name != nullptr ? name : c10::toString(type);
}

// A set of scalar types an entry point accepts for its inputs. A literal type, so a Signature can be constexpr.
class DtypeSet {
 public:
  constexpr DtypeSet() = default;
  constexpr DtypeSet(std::initializer_list<at::ScalarType> types) {
    for (at::ScalarType t : types) bits_ |= bit(t);
  }
  constexpr bool contains(at::ScalarType t) const { return (bits_ & bit(t)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr DtypeSet operator|(const DtypeSet &other) const {
    DtypeSet s;
    s.bits_ = bits_ | other.bits_;
    return s;
  }
  std::string to_string(const char *separator = ", ") const {
    std::string out;
    for (int i = 0; i < static_cast<int>(at::ScalarType::NumOptions); ++i) {
      auto t = static_cast<at::ScalarType>(i);
      if (contains(t)) out += (out.empty() ? "" : separator) + std::string(ms_dtype_name(t));
    }
    return out;
  }

 private:
  static constexpr unsigned __int128 bit(at::ScalarType t) {
    return static_cast<unsigned __int128>(1) << static_cast<int>(t);
  }
  unsigned __int128 bits_ = 0;
};

constexpr DtypeSet floating_types() { return {at::kHalf, at::kBFloat16, at::kFloat, at::kDouble}; }
// The sets follow ATen's dispatch macros (AT_DISPATCH_INTEGRAL_TYPES, AT_BAREBONES_UNSIGNED_TYPES, ...): most
// CPU kernels support integral_types(); only a few also handle the wide unsigned types.
constexpr DtypeSet integral_types() { return {at::kChar, at::kShort, at::kInt, at::kLong, at::kByte}; }
constexpr DtypeSet barebones_unsigned_types() { return {at::kUInt16, at::kUInt32, at::kUInt64}; }
constexpr DtypeSet complex_types() { return {at::kComplexFloat, at::kComplexDouble}; }
constexpr DtypeSet bool_type() { return {at::kBool}; }

}  // namespace ms_ext
