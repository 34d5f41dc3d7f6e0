// Filling an ms_ext_attr_value (c_api.h), shared by the two attribute sources of the C runtime: MindSpore's
// AotExtra (aot_extra_abi0.cpp, old C++ ABI) and packed attribute tables (attr_table.cpp). Internal to ms_ext/src.
// Everything here is inline and takes only C types or std::string by reference inside one translation unit, so
// including it from translation units of either ABI is safe.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "ms_ext/c_api.h"

namespace ms_ext_decode {

template <typename T>
inline T *copy_to_malloc(const T *data, size_t count) {
  T *out = static_cast<T *>(std::malloc(sizeof(T) * (count == 0 ? 1 : count)));
  if (out == nullptr) throw std::bad_alloc();
  if (count != 0) std::memcpy(out, data, sizeof(T) * count);
  return out;
}

inline void set_str(const char *data, size_t size, ms_ext_attr_value *out) {
  out->str = static_cast<char *>(std::malloc(size + 1));
  if (out->str == nullptr) throw std::bad_alloc();
  if (size != 0) std::memcpy(out->str, data, size);
  out->str[size] = '\0';
  out->count = size;
}

template <typename T, typename Out>
inline void set_2d(const std::vector<std::vector<T>> &rows, Out **flat, ms_ext_attr_value *out) {
  std::vector<Out> all;
  std::vector<size_t> lengths;
  for (const auto &row : rows) {
    all.insert(all.end(), row.begin(), row.end());
    lengths.push_back(row.size());
  }
  *flat = copy_to_malloc(all.data(), all.size());
  out->count = all.size();
  out->row_lengths = copy_to_malloc(lengths.data(), lengths.size());
  out->rows = lengths.size();
}

// A number written as text by aot_ops (a float's Python repr, or an int): the whole text must be one number.
inline double parse_exact_double(const std::string &text) {
  const char *begin = text.c_str();
  char *end = nullptr;
  errno = 0;
  const double value = std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size() || errno == ERANGE)
    throw std::invalid_argument("'" + text + "' is not a float");
  return value;
}

inline int64_t parse_int(const std::string &text) {
  const char *begin = text.c_str();
  char *end = nullptr;
  errno = 0;
  const long long value = std::strtoll(begin, &end, 10);
  if (text.empty() || end != begin + text.size() || errno == ERANGE)
    throw std::invalid_argument("'" + text + "' is not an int");
  return static_cast<int64_t>(value);
}

// "a,b,c" split at commas ("" is no items).
inline std::vector<std::string> split(const std::string &text, char separator) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t at = text.find(separator, start);
    out.push_back(text.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return out;
    start = at + 1;
  }
}

inline std::vector<double> parse_exact_doubles(const std::string &text) {
  std::vector<double> out;
  for (const std::string &item : split(text, ',')) out.push_back(parse_exact_double(item));
  return out;
}

inline std::vector<int64_t> parse_ints(const std::string &text) {
  std::vector<int64_t> out;
  for (const std::string &item : split(text, ',')) out.push_back(parse_int(item));
  return out;
}

}  // namespace ms_ext_decode
