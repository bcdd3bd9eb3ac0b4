// steptrace/core/line_fields.hpp - the step line, declared once: every field a step line can carry, a
// typed row each (core/line_fields_step.hpp, _gpu.hpp, _verdicts.hpp). The rows decide the compact line
// and the run record (core/line_tiers.hpp: which fields, how their numbers are written), and
// tests/test_schema.cpp holds every other output to them: the section writers (every field a line
// carries has its row and type; every row is carried by some line), docs/schema.md's step-line tables
// (rendered from the rows), the Prometheus exporter's pointers, the SQLite views and the report's fields.
// Adding a field is a row here plus its computation in a section writer.
#pragma once
#include "../version.hpp"
#include <string_view>
#include <vector>

#include "line_field.hpp"
#include "line_fields_gpu.hpp"
#include "line_fields_step.hpp"
#include "line_fields_verdicts.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// Every row, in the order of docs/schema.md's sections: step, GPU, verdicts. The compact line and the
/// run record write their fields in this order.
inline const std::vector<LineField>& line_fields() {
  static const std::vector<LineField> all = [] {
    std::vector<LineField> v;
    for (const LineField& f : line_field::kStepFields) v.push_back(f);
    for (const LineField& f : line_field::kGpuFields) v.push_back(f);
    for (const LineField& f : line_field::kVerdictFields) v.push_back(f);
    return v;
  }();
  return all;
}

namespace details {
/// line_fields()' paths as segments, made once.
inline const std::vector<std::vector<std::string_view>>& line_field_segments() {
  static const std::vector<std::vector<std::string_view>> all = [] {
    std::vector<std::vector<std::string_view>> v;
    for (const LineField& f : line_fields()) v.push_back(pointer_segments(f.path));
    return v;
  }();
  return all;
}
}  // namespace details

/// The row declaring the field at `segs` (a pointer's segments, escaped as in the pointer; an array
/// element's segment is its index, which the row's "*" matches). nullptr: no row.
inline const LineField* line_field_at(const std::vector<std::string_view>& segs) {
  const auto& all = details::line_field_segments();
  for (std::size_t i = 0; i < all.size(); ++i)
    if (details::segments_match(all[i], segs)) return &line_fields()[i];
  return nullptr;
}
inline const LineField* line_field_at(std::string_view pointer) {
  return line_field_at(details::pointer_segments(pointer));
}

STEPTRACE_END_NAMESPACE  // steptrace
