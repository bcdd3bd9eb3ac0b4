// steptrace/core/line_rows.hpp - a row of the line's declaration named at compile time: a writer writes
// a field through its row's handle (STEPTRACE_ROW("/overhead/within_budget"), STEPTRACE_END_ROW(...),
// STEPTRACE_STALL_ROW(...), STEPTRACE_RESUMED_ROW(...)),
// so a path no row declares does not compile, nor does a value the row's type does not take, nor a null
// where the row is never null (LineOut's Row overloads, core/line_out.hpp). The key written is the
// path's last segment; where it is written LineOut checks at run time (a handle written in another
// container is counted with the undeclared values).
#pragma once
#include "../version.hpp"
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "line_fields.hpp"

STEPTRACE_BEGIN_NAMESPACE
namespace line_field {
namespace rows {

template <std::size_t N>
constexpr int32_t count(const LineField (&)[N]) {
  return static_cast<int32_t>(N);
}
/// The first row of `r` at `path` (the first of a path declared twice, as record_fields' lookups), -1: none.
template <std::size_t N>
constexpr int32_t index_in(const LineField (&r)[N], std::string_view path) {
  for (std::size_t i = 0; i < N; ++i)
    if (std::string_view(r[i].path) == path) return static_cast<int32_t>(i);
  return -1;
}
/// The row's index in record_fields(Record::step): kStepFields, kGpuFields, kVerdictFields, in that
/// order (core/line_fields.hpp); -1: none.
constexpr int32_t step_index(std::string_view path) {
  if (const int32_t i = index_in(kStepFields, path); i >= 0) return i;
  if (const int32_t i = index_in(kGpuFields, path); i >= 0) return count(kStepFields) + i;
  if (const int32_t i = index_in(kVerdictFields, path); i >= 0) return count(kStepFields) + count(kGpuFields) + i;
  return -1;
}
constexpr LineField step_raw(int32_t i) {
  if (i < count(kStepFields)) return kStepFields[i];
  i -= count(kStepFields);
  if (i < count(kGpuFields)) return kGpuFields[i];
  return kVerdictFields[i - count(kGpuFields)];
}
/// A row as record_fields() holds it: a row shown with the row above takes that row's nullability
/// (the first row above not shown with its own above, as record_fields() passes it down).
template <class Raw>
constexpr LineField as_recorded(int32_t i, Raw raw) {
  LineField f = raw(i);
  for (int32_t j = i; j > 0 && raw(j).shown == Shown::with_above;) {
    --j;
    if (raw(j).shown != Shown::with_above || j == 0) {
      f.nulls = raw(j).nulls;
      break;
    }
  }
  return f;
}
constexpr LineField step_at(int32_t i) { return as_recorded(i, [](int32_t k) { return step_raw(k); }); }
constexpr int32_t end_index(std::string_view path) { return index_in(kEndFields, path); }
constexpr int32_t stall_index(std::string_view path) { return index_in(kStallFields, path); }
constexpr int32_t resumed_index(std::string_view path) { return index_in(kResumedFields, path); }
/// The row's index in record_fields(R); -1: none.
template <Record R>
constexpr int32_t index_of(std::string_view path) {
  if constexpr (R == Record::step) return step_index(path);
  else if constexpr (R == Record::end) return end_index(path);
  else if constexpr (R == Record::stall) return stall_index(path);
  else return resumed_index(path);
}
constexpr LineField end_at(int32_t i) { return as_recorded(i, [](int32_t k) { return kEndFields[k]; }); }
constexpr LineField stall_at(int32_t i) { return as_recorded(i, [](int32_t k) { return kStallFields[k]; }); }
constexpr LineField resumed_at(int32_t i) { return as_recorded(i, [](int32_t k) { return kResumedFields[k]; }); }
/// Row i of record_fields(R), as the handles read it at compile time.
template <Record R>
constexpr LineField at(int32_t i) {
  if constexpr (R == Record::step) return step_at(i);
  else if constexpr (R == Record::end) return end_at(i);
  else if constexpr (R == Record::stall) return stall_at(i);
  else return resumed_at(i);
}

/// A path's last segment: the key a row's value is written under.
constexpr std::string_view last_segment(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace rows

/// Whether a row of type `t` takes a value of type V (an integer row takes integers only: a double is
/// not written as one; a number row takes both).
template <class V>
constexpr bool row_takes(FieldType t) {
  using T = std::remove_cv_t<std::remove_reference_t<V>>;
  if constexpr (std::is_same_v<T, std::nullptr_t>) return false;  // converts to string_view, and is no text
  else if constexpr (std::is_same_v<T, bool>) return t == FieldType::boolean;
  else if constexpr (std::is_integral_v<T>) return t == FieldType::integer || t == FieldType::number;
  else if constexpr (std::is_floating_point_v<T>) return t == FieldType::number;
  else if constexpr (std::is_convertible_v<const T&, std::string_view>) return t == FieldType::string;
  else return false;
}

/// A row of record R, named at compile time (STEPTRACE_ROW, STEPTRACE_END_ROW); I is -1 where no row
/// declares the path named, which does not compile.
template <Record R, int32_t I>
struct Row {
  static_assert(I >= 0, "STEPTRACE_ROW / STEPTRACE_END_ROW / STEPTRACE_STALL_ROW / STEPTRACE_RESUMED_ROW: no row of the record declares this path (core/line_fields*.hpp)");
  static constexpr Record record = R;
  static constexpr int32_t index = I;  // into record_fields(R)
  static constexpr LineField field() { return rows::at<R>(I); }
  /// The key its value is written under (its path's last segment; a "*" row's key is the writer's).
  static constexpr std::string_view name() { return rows::last_segment(field().path); }
  static_assert(name() != "*", "a row whose last segment is \"*\" has no fixed key: write it by name");
  static_assert(name().find('~') == std::string_view::npos, "a key with a JSON pointer escape: write it by name");
};

}  // namespace line_field
STEPTRACE_END_NAMESPACE  // steptrace

/// The step line's row at `path` (a JSON pointer, as declared in core/line_fields*.hpp).
#define STEPTRACE_ROW(path) \
  ::steptrace::line_field::Row<::steptrace::Record::step, ::steptrace::line_field::rows::step_index(path)>{}
/// The end record's row at `path` (core/line_fields_end.hpp).
#define STEPTRACE_END_ROW(path) \
  ::steptrace::line_field::Row<::steptrace::Record::end, ::steptrace::line_field::rows::end_index(path)>{}
/// The stall record's row at `path` (core/line_fields_events.hpp).
#define STEPTRACE_STALL_ROW(path) \
  ::steptrace::line_field::Row<::steptrace::Record::stall, ::steptrace::line_field::rows::stall_index(path)>{}
/// The resumed record's row at `path` (core/line_fields_events.hpp).
#define STEPTRACE_RESUMED_ROW(path) \
  ::steptrace::line_field::Row<::steptrace::Record::resumed, ::steptrace::line_field::rows::resumed_index(path)>{}
