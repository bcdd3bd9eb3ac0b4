// steptrace/core/schema_data.hpp - the line's declaration (core/line_fields.hpp) as data: each record's
// rows with their machine columns - JSON pointer, type, the tiers that carry it, how the compact line
// and the run record write its number, unit, whether it can be null - so that what reads lines outside
// this library (the Python package's report and checks, the SQLite views' check, a dashboard's own
// tooling) reads the declaration itself, not a copy of it or the C++ source. The rows' meaning and null
// cases are docs/schema.md's. Shipped as python/steptrace/schema.json; tests/test_schema_doc.cpp holds
// that file to this rendering. Pure C++17.
#pragma once
#include "../version.hpp"
#include <string>
#include <utility>
#include <vector>

#include "end_line.hpp"
#include "line_fields.hpp"
#include "line_input.hpp"
#include "line_tiers.hpp"
#include "stall.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// The version of the document schema_data_json() writes (its "format").
inline constexpr const char* kSchemaDataFormat = "steptrace.schema/1";

namespace details {
inline void schema_string(std::string& out, const char* s) {
  out += '"';
  for (const char* c = s ? s : ""; *c; ++c) {
    const unsigned char u = static_cast<unsigned char>(*c);
    if (*c == '"' || *c == '\\') {
      out += '\\';
      out += *c;
    } else if (u < 0x20) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += *c;
    }
  }
  out += '"';
}
inline const char* schema_type_name(FieldType t) {
  switch (t) {
    case FieldType::string: return "string";
    case FieldType::number: return "number";
    case FieldType::integer: return "integer";
    case FieldType::boolean: return "boolean";
    case FieldType::object: return "object";
    case FieldType::names: return "names";
    case FieldType::array: return "array";
  }
  return "";
}
inline void schema_rows(std::string& out, Record r) {
  out += "\"fields\": [";
  bool first = true;
  for (const LineField& f : record_fields(r)) {
    out += first ? "\n    " : ",\n    ";
    first = false;
    out += "{\"path\": ";
    schema_string(out, f.path);
    out += ", \"type\": ";
    schema_string(out, schema_type_name(f.type));
    out += ", \"tiers\": [\"full\"";
    if (f.tiers & line_field::kCompact) out += ", \"compact\"";
    if (f.tiers & line_field::kRun) out += ", \"run\"";
    out += "]";
    if (f.type == FieldType::number || f.type == FieldType::integer)
      out += f.digits == Digits::integer ? ", \"digits\": \"integer\"" : ", \"digits\": \"six\"";
    out += ", \"unit\": ";
    schema_string(out, f.unit);
    out += never_null(f) ? ", \"nullable\": false}" : ", \"nullable\": true}";
  }
  out += "]";
}
}  // namespace details

/// The declaration as a JSON document, a row a line:
///   {"format": "steptrace.schema/1", "records": {
///     "step": {"schemas": {"full": ..., "compact": ..., "run": ...}, "fields": [{"path", "type", "tiers",
///              "digits" (numbers only: "six" | "integer"), "unit", "nullable"}, ...]},
///     "end": {"schemas": {"full": ...}, "fields": [...]},
///     "stall": {...}, "resumed": {...}}}   (the stall watchdog's records, one schema for both)
/// `path` is a JSON pointer whose segment "*" stands for any name of a `names` object or any element of
/// an `array`; `nullable` false: never null.
inline std::string schema_data_json() {
  struct Shipped {
    const char* name;
    Record record;
    std::vector<std::pair<const char*, const char*>> schemas;  // tier -> schema
  };
  const Shipped records[] = {
      {"step", Record::step, {{"full", kSchemaVersion}, {"compact", kCompactSchema}, {"run", kRunSchema}}},
      {"end", Record::end, {{"full", kEndSchemaVersion}}},
      {"stall", Record::stall, {{"full", kStallSchemaVersion}}},
      {"resumed", Record::resumed, {{"full", kStallSchemaVersion}}},
  };
  std::string out = "{\"format\": ";
  details::schema_string(out, kSchemaDataFormat);
  out += ",\n \"records\": {";
  for (const Shipped& r : records) {
    out += r.record == Record::step ? "\n  " : "},\n  ";
    details::schema_string(out, r.name);
    out += ": {\"schemas\": {";
    for (const auto& [tier, schema] : r.schemas) {
      if (tier != r.schemas.front().first) out += ", ";
      details::schema_string(out, tier);
      out += ": ";
      details::schema_string(out, schema);
    }
    out += "},\n   ";
    details::schema_rows(out, r.record);
  }
  out += "}}}\n";
  return out;
}

STEPTRACE_END_NAMESPACE  // steptrace
