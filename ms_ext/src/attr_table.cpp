// Packed attribute tables: many attributes carried as ONE string (c_api.h, "packed attributes").
//
// MindSpore converts every attribute of a Custom primitive on every PyNative call, about a microsecond each; a
// program of a hundred ATen calls has over a thousand. aot_ops packs such attributes into one string
// (aot_ops/_core/packed_attrs.py writes the format below), which costs MindSpore one conversion, and ms_ext::Attrs
// reads the table exactly as it reads MindSpore's own attributes.
//
// Format: entries one after another, each
//     <name>:<kind>:<payload bytes>:<payload>\n
// <kind> is an ms_ext_attr_kind digit. Payloads: bool "0"/"1"; int decimal; float its Python repr; str the raw
// bytes; lists comma-separated items; 2-D lists "<rows>;" then the rows separated by ';'.
#include <string>
#include <unordered_map>

#include "attr_decode.h"
#include "c_boundary.h"
#include "ms_ext/c_api.h"

struct ms_ext_attr_table {
  struct Entry {
    ms_ext_attr_kind kind;
    std::string payload;
  };
  std::unordered_map<std::string, Entry> entries;
};

namespace {

using namespace ms_ext_decode;

int fail(const std::string &message) {
  ms_ext_set_last_error(message.c_str());
  return -1;
}

// The rows of a 2-D payload "<rows>;r0;r1;..." (each row still comma-separated text).
std::vector<std::string> rows_of(const std::string &payload) {
  const size_t head = payload.find(';');
  if (head == std::string::npos) throw std::invalid_argument("a 2-D list needs '<rows>;'");
  const int64_t count = parse_int(payload.substr(0, head));
  const std::string rest = payload.substr(head + 1);
  std::vector<std::string> rows;
  if (count > 0) {
    rows = split(rest, ';');
    if (rows.empty()) rows.emplace_back();  // one empty row
  } else if (!rest.empty()) {
    throw std::invalid_argument("a 2-D list of 0 rows has items");
  }
  if (static_cast<int64_t>(rows.size()) != count)
    throw std::invalid_argument("a 2-D list announces " + std::to_string(count) + " rows and has " +
                                std::to_string(rows.size()));
  return rows;
}

template <typename T>
std::vector<std::vector<T>> parse_2d(const std::string &payload) {
  std::vector<std::vector<T>> out;
  for (const std::string &row : rows_of(payload)) {
    if constexpr (std::is_same_v<T, int64_t>) {
      out.push_back(parse_ints(row));
    } else {
      out.push_back(parse_exact_doubles(row));
    }
  }
  return out;
}

// Whether an entry of kind `stored` reads as `wanted`: the same kind, or ints where floats are asked (Python's
// numbers: a float argument given as 2, a float list written [1, 2]), or an empty list as any list, or text where a
// float or a float list is asked. The last is the rule of MindSpore's own attributes (aot_extra_abi0.cpp,
// holds_text): aot_ops sends doubles as their exact text because MindSpore keeps float attributes as float32, and
// a table must read every attribute exactly as MindSpore's attributes read it (an ATen `float[]?` argument such as
// upsample's scale_factors arrives here as text).
bool readable_as(const ms_ext_attr_table::Entry &entry, ms_ext_attr_kind wanted) {
  const ms_ext_attr_kind stored = entry.kind;
  if (stored == wanted) return true;
  if (stored == MS_EXT_ATTR_STR && (wanted == MS_EXT_ATTR_FLOAT || wanted == MS_EXT_ATTR_FLOAT_LIST)) return true;
  if (stored == MS_EXT_ATTR_INT && wanted == MS_EXT_ATTR_FLOAT) return true;
  if (stored == MS_EXT_ATTR_INT_LIST && wanted == MS_EXT_ATTR_FLOAT_LIST) return true;
  if (stored == MS_EXT_ATTR_INT_2D && wanted == MS_EXT_ATTR_FLOAT_2D) return true;
  const bool empty_list = stored == MS_EXT_ATTR_INT_LIST && entry.payload.empty();
  return empty_list && (wanted == MS_EXT_ATTR_INT_2D || wanted == MS_EXT_ATTR_FLOAT_2D);
}

void decode(const ms_ext_attr_table::Entry &entry, ms_ext_attr_kind kind, ms_ext_attr_value *out) {
  const std::string &text = entry.payload;
  switch (kind) {
    case MS_EXT_ATTR_BOOL:
      if (text != "0" && text != "1") throw std::invalid_argument("'" + text + "' is not a bool");
      out->bool_value = text == "1";
      return;
    case MS_EXT_ATTR_INT:
      out->int_value = parse_int(text);
      return;
    case MS_EXT_ATTR_FLOAT:
      out->float_value = parse_exact_double(text);
      return;
    case MS_EXT_ATTR_STR:
      set_str(text.data(), text.size(), out);
      return;
    case MS_EXT_ATTR_INT_LIST: {
      const std::vector<int64_t> v = parse_ints(text);
      out->ints = copy_to_malloc(v.data(), v.size());
      out->count = v.size();
      return;
    }
    case MS_EXT_ATTR_FLOAT_LIST: {
      const std::vector<double> v = parse_exact_doubles(text);
      out->floats = copy_to_malloc(v.data(), v.size());
      out->count = v.size();
      return;
    }
    case MS_EXT_ATTR_INT_2D:
      set_2d<int64_t, int64_t>(entry.kind == MS_EXT_ATTR_INT_LIST ? std::vector<std::vector<int64_t>>{}
                                                                   : parse_2d<int64_t>(text),
                               &out->ints, out);
      return;
    case MS_EXT_ATTR_FLOAT_2D:
      set_2d<double, double>(entry.kind == MS_EXT_ATTR_INT_LIST ? std::vector<std::vector<double>>{}
                                                                 : parse_2d<double>(text),
                             &out->floats, out);
      return;
  }
  throw std::invalid_argument("unknown attribute kind " + std::to_string(static_cast<int>(kind)));
}

// Reads "<digits>:" at `pos` (advanced past the colon).
size_t read_length(const char *packed, size_t size, size_t *pos) {
  size_t value = 0, digits = 0;
  while (*pos < size && packed[*pos] >= '0' && packed[*pos] <= '9' && digits < 18) {
    value = value * 10 + static_cast<size_t>(packed[*pos] - '0');
    ++*pos;
    ++digits;
  }
  if (digits == 0 || *pos >= size || packed[*pos] != ':') throw std::invalid_argument("a length is malformed");
  ++*pos;
  return value;
}

}  // namespace

extern "C" {

ms_ext_attr_table *ms_ext_attr_table_parse(const char *packed, size_t size) {
  if (packed == nullptr && size != 0) {
    fail("packed attributes: NULL text");
    return nullptr;
  }
  auto *table = new (std::nothrow) ms_ext_attr_table();
  if (table == nullptr) {
    fail("packed attributes: out of memory");
    return nullptr;
  }
  size_t pos = 0;
  const auto parse = [&]() -> ms_ext_attr_table * {
    while (pos < size) {
      const char *colon = static_cast<const char *>(std::memchr(packed + pos, ':', size - pos));
      if (colon == nullptr || colon == packed + pos) throw std::invalid_argument("an entry has no name");
      std::string name(packed + pos, colon);
      pos = static_cast<size_t>(colon - packed) + 1;
      if (pos + 1 >= size || packed[pos] < '0' || packed[pos] > '7' || packed[pos + 1] != ':')
        throw std::invalid_argument("entry '" + name + "' has no kind digit");
      const auto kind = static_cast<ms_ext_attr_kind>(packed[pos] - '0');
      pos += 2;
      const size_t length = read_length(packed, size, &pos);
      if (length > size - pos || pos + length >= size || packed[pos + length] != '\n')
        throw std::invalid_argument("entry '" + name + "' runs past the end of the text");
      ms_ext_attr_table::Entry entry{kind, std::string(packed + pos, length)};
      if (!table->entries.emplace(std::move(name), std::move(entry)).second)
        throw std::invalid_argument("an attribute appears twice");
      pos += length + 1;
    }
    return table;
  };
  return ms_ext_c::at_c_boundary(parse, [&](const char *text) -> ms_ext_attr_table * {
    delete table;
    fail(std::string("packed attributes, at byte ") + std::to_string(pos) + ": " + text);
    return nullptr;
  });
}

void ms_ext_attr_table_free(ms_ext_attr_table *table) { delete table; }

int ms_ext_attr_table_has(const ms_ext_attr_table *table, const char *name) {
  if (table == nullptr || name == nullptr) return 0;
  return table->entries.count(name) != 0 ? 1 : 0;
}

int ms_ext_attr_table_get(const ms_ext_attr_table *table, const char *name, ms_ext_attr_kind kind,
                          ms_ext_attr_value *out) {
  if (out == nullptr) return fail("ms_ext_attr_table_get: out is NULL");
  std::memset(out, 0, sizeof(*out));
  out->kind = kind;
  if (table == nullptr || name == nullptr) return fail("the attribute is missing (no attributes were passed)");
  const auto found = table->entries.find(name);
  if (found == table->entries.end()) return fail("the attribute is missing");
  if (!readable_as(found->second, kind))
    return fail(std::string("the attribute is a ") + ms_ext_attr_kind_name(found->second.kind));
  return ms_ext_c::at_c_boundary(
      [&] {
        decode(found->second, kind, out);
        return 0;
      },
      [out](const char *text) {
        ms_ext_attr_value_free(out);  // no half-filled value reaches the caller
        return fail(text);
      });
}

}  // extern "C"
