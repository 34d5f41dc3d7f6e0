// MindSpore dtype strings <-> torch scalar types.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace ms_ext {

// The dtype strings MindSpore 2.10 sends to an aot launch function, and the aliases its documentation lists.
// The aliases follow C: "float" is float32, "int" int32, "uint" uint32. Any other string is an error: guessing a
// dtype would make ATen read or write past the buffer (a 1-byte bool read as a 4-byte float).
inline at::ScalarType scalar_type_from_ms(const char *dtype) {
  struct Entry {
    const char *name;
    at::ScalarType type;
  };
  static const Entry table[] = {
      {"float16", at::kHalf},          {"float32", at::kFloat},       {"float64", at::kDouble},
      {"bfloat16", at::kBFloat16},     {"int8", at::kChar},           {"int16", at::kShort},
      {"int32", at::kInt},             {"int64", at::kLong},          {"uint8", at::kByte},
      {"uint16", at::kUInt16},         {"uint32", at::kUInt32},       {"uint64", at::kUInt64},
      {"bool", at::kBool},             {"complex64", at::kComplexFloat}, {"complex128", at::kComplexDouble},
      {"float", at::kFloat},           {"int", at::kInt},             {"uint", at::kUInt32},
  };
  if (dtype != nullptr) {
    for (const Entry &e : table) {
      if (std::strcmp(dtype, e.name) == 0) return e.type;
    }
  }
  throw std::invalid_argument(std::string("unsupported dtype string '") + (dtype ? dtype : "(null)") +
                              "' (MindSpore sends float16, float32, float64, bfloat16, int8, int16, int32, int64, "
                              "uint8, uint16, uint32, uint64, bool, complex64, complex128)");
}

// The dtypes MindSpore tensors can have. Their index in this table is how dtypes cross the C interface of a
// kernel's dtype rule (ms_ext_output_types_<NAME>); aot_ops lists them in the same order.
constexpr int kNumMsDtypes = 15;
constexpr at::ScalarType kMsDtypeOrder[kNumMsDtypes] = {
    at::kHalf, at::kFloat, at::kDouble, at::kBFloat16, at::kChar, at::kShort, at::kInt, at::kLong,
    at::kByte, at::kUInt16, at::kUInt32, at::kUInt64, at::kBool, at::kComplexFloat, at::kComplexDouble};

// The name MindSpore users know for a torch scalar type (used in every error message).
inline const char *ms_dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kHalf: return "float16";
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kBFloat16: return "bfloat16";
    case at::kChar: return "int8";
    case at::kShort: return "int16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kByte: return "uint8";
    case at::kUInt16: return "uint16";
    case at::kUInt32: return "uint32";
    case at::kUInt64: return "uint64";
    case at::kBool: return "bool";
    case at::kComplexFloat: return "complex64";
    case at::kComplexDouble: return "complex128";
    default: return c10::toString(type);
  }
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
