// steptrace/core/line_field.hpp - what one row of the line's declaration holds (core/line_fields.hpp):
// a field's JSON pointer, its JSON type, the tiers that carry it besides the full line, how its number
// is written there, its unit, how docs/schema.md shows it and whether it can be null. Its meaning and
// null cases are docs/schema_prose.hpp's.
#pragma once
#include "../version.hpp"
#include <cstdint>
#include <string_view>
#include <vector>

STEPTRACE_BEGIN_NAMESPACE

/// A field's JSON type. `number` takes any JSON number (a whole value is written without a fraction),
/// `integer` only integers (counts, bytes, ids). `names`: an object whose keys are names chosen at run
/// time (phases, scalars, collectives), its entries declared under the segment "*".
enum class FieldType : uint8_t { string, number, integer, boolean, object, names, array };

namespace line_field {
/// Where a field goes besides the full line (`line_detail=full`, which has every field): the compact
/// line (`steptrace.step/2`), the run record (`steptrace.run/2`). Bits.
enum FieldTier : uint8_t { kFullOnly = 0, kCompact = 1, kRun = 2 };
}  // namespace line_field

/// How the compact line and the run record write a number: to 6 significant digits (what a measured
/// time or share can mean), or as the integer nearest (counts and bytes are exact; a wall-clock time to
/// the millisecond).
enum class Digits : uint8_t { six, integer };

/// How docs/schema.md shows a row: in a table row of its own, with the row above it (one table row naming
/// both: "`samples`, `samples_per_second` | samples, samples/s"), or as a member its parent's row
/// describes (`device`'s `{index, name, ...}`).
enum class Shown : uint8_t { own, with_above, member };
/// Whether the field can be null: `never`, or possibly (its null cases: docs/schema.md). A row shown with
/// the row above takes that row's in record_fields().
enum class Nulls : uint8_t { never, possible };

/// A row's machine columns: what the line's writers, the compact line, the run record and the checks
/// read. What a field means and when it is null are prose, kept out of the library: docs/schema_prose.hpp
/// (the docs renderer's and the schema tests' only), keyed by the row's path.
struct LineField {
  const char* table;  // the docs/schema.md table that shows it; nullptr: shown by the row above or by
                      // its parent's row
  const char* path;   // JSON pointer; a segment "*" stands for any name (of a `names` object) or any
                      // element (of an array)
  FieldType type;
  uint8_t tiers;  // FieldTier bits
  Digits digits;
  const char* unit;
  Shown shown;
  Nulls nulls;

  /// This row, carried by `tier` too, its numbers written to `d` there.
  constexpr LineField in(line_field::FieldTier tier, Digits d) const {
    LineField f = *this;
    f.tiers = static_cast<uint8_t>(f.tiers | tier);
    f.digits = d;
    return f;
  }
  constexpr LineField in(line_field::FieldTier tier) const { return in(tier, digits); }
};

namespace line_field {

constexpr Digits digits_of(FieldType t) { return t == FieldType::integer ? Digits::integer : Digits::six; }

/// A field docs/schema.md's table `table` shows in a row of its own (its prose: docs/schema_prose.hpp).
constexpr LineField row(const char* table, const char* path, FieldType type, const char* unit, Nulls nulls) {
  return LineField{table, path, type, kFullOnly, digits_of(type), unit, Shown::own, nulls};
}
/// A field shown in the row above, with its own unit ("`samples`, `samples_per_second` | samples, samples/s").
constexpr LineField same(const char* path, FieldType type, const char* unit) {
  return LineField{nullptr, path, type, kFullOnly, digits_of(type), unit, Shown::with_above, Nulls::possible};
}
/// A member its parent's row describes (`device`'s `{index, name, ...}`).
constexpr LineField member(const char* path, FieldType type, const char* unit) {
  return LineField{nullptr, path, type, kFullOnly, digits_of(type), unit, Shown::member, Nulls::possible};
}

}  // namespace line_field

namespace details {

/// A JSON pointer's segments, as escaped in the pointer (`~0`, `~1` kept), into `out`.
inline void pointer_segments_into(std::string_view p, std::vector<std::string_view>& out) {
  out.clear();
  std::size_t i = 1;
  while (i <= p.size() && !p.empty()) {
    const std::size_t j = p.find('/', i);
    out.push_back(p.substr(i, (j == std::string_view::npos ? p.size() : j) - i));
    if (j == std::string_view::npos) break;
    i = j + 1;
  }
}
inline std::vector<std::string_view> pointer_segments(std::string_view p) {
  std::vector<std::string_view> out;
  pointer_segments_into(p, out);
  return out;
}

/// Whether `segs` match the pattern's segments exactly (`*`: any one).
inline bool segments_match(const std::vector<std::string_view>& pattern, const std::vector<std::string_view>& segs) {
  if (pattern.size() != segs.size()) return false;
  for (std::size_t i = 0; i < segs.size(); ++i)
    if (pattern[i] != "*" && pattern[i] != segs[i]) return false;
  return true;
}

/// Whether `segs` is a proper prefix of the pattern (a null object standing for fields it would hold).
inline bool segments_prefix(const std::vector<std::string_view>& pattern, const std::vector<std::string_view>& segs) {
  if (segs.size() >= pattern.size()) return false;
  for (std::size_t i = 0; i < segs.size(); ++i)
    if (pattern[i] != "*" && pattern[i] != segs[i]) return false;
  return true;
}

}  // namespace details

STEPTRACE_END_NAMESPACE  // steptrace
