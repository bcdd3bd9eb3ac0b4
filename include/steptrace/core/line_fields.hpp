// steptrace/core/line_fields.hpp - the step line and the event records, declared once: every field they
// can carry, a typed row each (core/line_fields_step.hpp, _gpu.hpp, _verdicts.hpp; the end record's
// core/line_fields_end.hpp; the stall and resumed records' core/line_fields_events.hpp). The step line's rows decide the compact line and the run record
// (core/line_tiers.hpp: which fields, how their numbers are written), and tests/test_schema.cpp holds
// the writers (every field a record carries has its row and type; every row is carried by some record)
// and the Prometheus exporter's pointers to the rows; tests/test_schema_doc.cpp renders docs/schema.md's
// field tables from the rows and holds python/steptrace/schema.json (core/schema_data.hpp: the rows as
// data, which the report's fields and the SQLite views are tested against). Adding a field is a row
// here plus its computation in a writer (core/line_sections*.hpp, core/end_line.hpp).
#pragma once
#include "../version.hpp"
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

#include "json_flat.hpp"
#include "line_field.hpp"
#include "line_fields_end.hpp"
#include "line_fields_events.hpp"
#include "line_fields_gpu.hpp"
#include "line_fields_step.hpp"
#include "line_fields_verdicts.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// The records declared: the step line, the end record, the stall watchdog's stall and resumed records.
enum class Record : uint8_t { step, end, stall, resumed };
inline constexpr Record kRecords[] = {Record::step, Record::end, Record::stall, Record::resumed};

/// Every row of a record, in the order of docs/schema.md's sections (the step line's: step, GPU,
/// verdicts). The compact line and the run record write their fields in this order.
/// A row shown with the row above it (Shown::with_above) takes that row's nullability here.
inline const std::vector<LineField>& record_fields(Record r) {
  const auto add = [](std::vector<LineField>& v, const auto& rows) {
    for (LineField f : rows) {
      if (f.shown == Shown::with_above && !v.empty()) f.nulls = v.back().nulls;
      v.push_back(f);
    }
  };
  // Never destroyed (docs/architecture.md, "statics"): read by the exit hook's last lines.
  static const std::vector<LineField>* step = new std::vector<LineField>([&] {
    std::vector<LineField> v;
    add(v, line_field::kStepFields);
    add(v, line_field::kGpuFields);
    add(v, line_field::kVerdictFields);
    return v;
  }());
  const auto of = [&](const auto& rows) {
    std::vector<LineField> v;
    add(v, rows);
    return v;
  };
  static const std::vector<LineField>* end = new std::vector<LineField>(of(line_field::kEndFields));
  static const std::vector<LineField>* stall = new std::vector<LineField>(of(line_field::kStallFields));
  static const std::vector<LineField>* resumed = new std::vector<LineField>(of(line_field::kResumedFields));
  switch (r) {
    case Record::step: return *step;
    case Record::end: return *end;
    case Record::stall: return *stall;
    case Record::resumed: break;
  }
  return *resumed;
}
inline const std::vector<LineField>& line_fields() { return record_fields(Record::step); }

namespace details {
/// record_fields()' paths as segments, made once.
inline const std::vector<std::vector<std::string_view>>& record_field_segments(Record r) {
  const auto make = [](Record which) {
    std::vector<std::vector<std::string_view>> v;
    for (const LineField& f : record_fields(which)) v.push_back(pointer_segments(f.path));
    return v;
  };
  using Segments = std::vector<std::vector<std::string_view>>;  // never destroyed, as record_fields()
  static const Segments* const made[] = {new Segments(make(Record::step)), new Segments(make(Record::end)),
                                         new Segments(make(Record::stall)), new Segments(make(Record::resumed))};
  return *made[static_cast<std::size_t>(r)];
}
inline const std::vector<std::vector<std::string_view>>& line_field_segments() {
  return record_field_segments(Record::step);
}
}  // namespace details

/// The row declaring the field at `segs` of a record (a pointer's segments, escaped as in the pointer;
/// an array element's segment is its index, which the row's "*" matches). nullptr: no row. The end
/// record's `after_last_step.gpu` holds what the step line's `between_steps.gpu` does: its members
/// are that object's rows.
inline const LineField* record_field_at(Record r, const std::vector<std::string_view>& segs) {
  if (r == Record::end && segs.size() > 2 && segs[0] == "after_last_step" && segs[1] == "gpu") {
    std::vector<std::string_view> between(segs);
    between[0] = "between_steps";
    return record_field_at(Record::step, between);
  }
  const auto& all = details::record_field_segments(r);
  for (std::size_t i = 0; i < all.size(); ++i)
    if (details::segments_match(all[i], segs)) return &record_fields(r)[i];
  return nullptr;
}
inline const LineField* line_field_at(const std::vector<std::string_view>& segs) {
  return record_field_at(Record::step, segs);
}
inline const LineField* line_field_at(std::string_view pointer) {
  return line_field_at(details::pointer_segments(pointer));
}

/// Whether a row's field is never null (docs/schema.md: its null cases begin with "never"). A member's
/// row says nothing: null is not ruled out.
inline bool never_null(const LineField& f) { return f.nulls == Nulls::never; }

/// A written value's JSON kind, as a row's type is checked against it.
enum class ValueKind : uint8_t { null, boolean, number, string, object, array };

/// Whether a value of kind `k` fits row `f`: of its type (an integer row's number written as an
/// integer: `integral`), or null where the row allows it.
inline bool value_fits(const LineField& f, ValueKind k, bool integral) {
  switch (k) {
    case ValueKind::null: return !never_null(f);
    case ValueKind::boolean: return f.type == FieldType::boolean;
    case ValueKind::string: return f.type == FieldType::string;
    case ValueKind::number: return f.type == FieldType::number || (f.type == FieldType::integer && integral);
    case ValueKind::object: return f.type == FieldType::object || f.type == FieldType::names;
    case ValueKind::array: return f.type == FieldType::array;
  }
  return false;
}

/// What a written line's leaves (core/json_flat.hpp: values and nulls, by pointer) say against the
/// declaration: a leaf no row declares, or one not of its row's type ("/gpu/kernels: 1.5, declared
/// integer"), at most `max` of them, then how many more. Empty: none. Objects and arrays are known by
/// their leaves here (an empty one leaves none). Every leaf is walked: a tool's check, not the writer's.
inline std::vector<std::string> declaration_problems(const FlatJson& leaves, Record record = Record::step,
                                                     std::size_t max = 8) {
  static const char* const kTypes[] = {"string", "number", "integer", "boolean", "object", "names", "array"};
  std::vector<std::string> out;
  std::size_t more = 0;
  std::vector<std::string_view> segs;
  for (const auto& [pointer, leaf] : leaves) {
    details::pointer_segments_into(pointer, segs);
    const LineField* f = record_field_at(record, segs);
    std::string problem;
    if (!f) {
      problem = pointer + ": no row declares it";
    } else {
      const ValueKind kind = leaf.kind == JsonLeaf::Kind::null      ? ValueKind::null
                             : leaf.kind == JsonLeaf::Kind::boolean ? ValueKind::boolean
                             : leaf.kind == JsonLeaf::Kind::string  ? ValueKind::string
                                                                    : ValueKind::number;
      if (!value_fits(*f, kind, leaf.integral)) {
        const std::string value = leaf.kind == JsonLeaf::Kind::null     ? "null"
                                  : leaf.kind == JsonLeaf::Kind::string ? "a string"
                                  : leaf.kind == JsonLeaf::Kind::boolean ? "a boolean"
                                                                         : std::to_string(leaf.number);
        problem = pointer + ": " + value +
                  (leaf.kind == JsonLeaf::Kind::number && f->type == FieldType::integer ? ", not written as an integer"
                                                                                        : "") +
                  ", declared " +
                  kTypes[static_cast<int>(f->type)] + (leaf.kind == JsonLeaf::Kind::null ? " and never null" : "");
      }
    }
    if (problem.empty()) continue;
    if (out.size() < max) out.push_back(std::move(problem));
    else ++more;
  }
  if (more) out.push_back("and " + std::to_string(more) + " more");
  return out;
}

STEPTRACE_END_NAMESPACE  // steptrace
