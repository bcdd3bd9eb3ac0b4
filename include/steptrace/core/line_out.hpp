// steptrace/core/line_out.hpp - a record being written (a step line, the end record, a stall record):
// LineOut, the only way the section writers reach the JSON, and the small helpers they share.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "json_writer.hpp"
#include "line_input.hpp"
#include "line_rows.hpp"
#include "reasons.hpp"
#include "tier_leaves.hpp"

STEPTRACE_BEGIN_NAMESPACE

namespace details {

inline std::string iso8601_utc(int64_t unix_ns) {
  const std::time_t secs = static_cast<std::time_t>(unix_ns / 1000000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>((unix_ns / 1000000) % 1000));
  return buf;
}

/// Why a number is written null although it was given: JSON has no NaN or infinity.
inline std::string not_finite_reason(double v) {
  return reason_text(Reason::not_finite, std::string(std::isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf") + ")");
}

/// One step of a `null_reasons` path: a member's name as it is, with `\` and `.` escaped (`\\`, `\.`),
/// so that a name with a dot in it (a phase `attn.qkv`, a scalar `loss.train`) stays one step:
/// `phases.attn\.qkv.gpu` (and an unregistered id's key `unknown.7`: `phases.unknown\.7.gpu`). Names
/// without either read as they are.
inline std::string path_segment(std::string_view name) {
  if (name.find_first_of("\\.") == std::string_view::npos) return std::string(name);
  std::string out;
  for (char c : name) {
    if (c == '\\' || c == '.') out += '\\';
    out += c;
  }
  return out;
}

/// Writers that closed more than they opened, or left something open at finish() (a bug in a section
/// writer; LineOut keeps the record well formed regardless). Tests hold it at 0.
inline std::atomic<uint64_t>& line_out_unbalanced() {
  static std::atomic<uint64_t> n{0};
  return n;
}

}  // namespace details

/// A record being written. The section writers reach the JSON only through it, and every value goes
/// through a call that knows what to do with null:
///   field(name, v)             a value that is never null: a count, a flag, a text, a number (a number
///                              that is not finite is written null, its reason says so);
///   field(name, opt, reason)   an optional: null, with `reason`, when empty;
///   null(name, reason)         a null, with its reason.
/// LineOut keeps the path of the open objects and arrays, so a null's reason is filed under its path
/// (`phases.forward.gpu.occupancy`; an array element by its index; details::path_segment) without a
/// section naming it, and finish() writes them as `null_reasons`. A value a check left out (`excluded`:
/// path -> why, from core/line_invariants.hpp) is written null with the check's reason wherever its path
/// comes; an object or array a check left out is written null the same way, and whatever a section then
/// writes into it is dropped. Containers close in the order they opened; an extra close is ignored and
/// finish() closes what is still open (both counted in details::line_out_unbalanced()).
/// Given its record's rows (`rows`: core/tier_leaves.hpp), LineOut finds each value's row as it writes
/// it: a value with no row, or not of its row's type, is counted (details::line_out_undeclared(): a
/// steptrace bug), and `tiers` (optional) receives the values of the compact line's and the run
/// record's rows, with the null reasons, for core/line_tiers.hpp to make them from.
class LineOut {
 public:
  explicit LineOut(const std::map<std::string, std::string>* excluded = nullptr, FlatJson* leaves = nullptr,
                   const details::RowTree* rows = nullptr, TierLeaves* tiers = nullptr)
      : excluded_(excluded), rows_(rows), tiers_(rows ? tiers : nullptr) {
    w_.record_leaves(leaves);
  }

  // ---- the record, objects and arrays ----
  LineOut& begin() {
    w_.begin_object();
    levels_.push_back({0, false, 0, false, rows_ ? details::RowTree::kRoot : -1, rows_});
    return *this;
  }
  /// `null_reasons` (every null filed, then what a check left out that no section wrote), closes the
  /// record and returns its text.
  std::string finish() {
    ensure_record();
    while (levels_.size() > 1) {
      details::line_out_unbalanced().fetch_add(1, std::memory_order_relaxed);
      close();
    }
    // What a check left out that no section wrote, unless it lies inside a null already filed (an
    // object left out whole: nothing inside it is in the line).
    if (excluded_)
      for (const auto& [path, why] : *excluded_)
        if (std::none_of(nulls_.begin(), nulls_.end(), [&](const auto& n) { return covers(n.first, path); }))
          nulls_.emplace_back(path, why);
    w_.key("null_reasons").begin_object();
    for (const auto& [path, why] : nulls_) w_.field(path, why);
    w_.end_object().end_object();
    if (tiers_)  // as the text reads back: the later of a path filed twice
      for (const auto& [path, why] : nulls_) tiers_->reasons[details::JsonWriter::valid_utf8(path)] = details::JsonWriter::valid_utf8(why);
    levels_.clear();
    names_.clear();
    return w_.release();
  }
  LineOut& begin_object(std::string_view name) { return open(name, false); }
  LineOut& begin_array(std::string_view name) { return open(name, true); }
  LineOut& end_object() { return close(); }
  LineOut& end_array() { return close(); }
  /// An object as the next element of the open array.
  LineOut& begin_element() {
    ensure_record();
    const std::size_t parent = path_.size();
    if (dropped()) return drop_level(false);
    const std::size_t index = levels_.back().next_index++;
    path_ += path_.empty() ? "" : ".";
    path_ += std::to_string(index);
    w_.begin_object();
    if (tiers_) names_.push_back(std::to_string(index));
    const details::RowTree* tree = levels_.back().tree;
    levels_.push_back({parent, false, 0, false, tree ? tree->element(levels_.back().node) : -1, tree});
    return *this;
  }

  // ---- members of the open object ----
  LineOut& field(std::string_view name, bool v) { return put(name, v); }
  LineOut& field(std::string_view name, std::string_view v) { return put(name, v); }
  LineOut& field(std::string_view name, const char* v) { return put(name, std::string_view(v)); }
  LineOut& field(std::string_view name, const std::string& v) { return put(name, std::string_view(v)); }
  template <class T>
  LineOut& field(std::string_view name, T* v) = delete;  // a pointer is not a flag (const char*: above)
  template <class Int, std::enable_if_t<std::is_integral_v<Int> && !std::is_same_v<Int, bool> && !std::is_same_v<Int, char> &&
                                            !std::is_same_v<Int, signed char>,
                                        int> = 0>
  LineOut& field(std::string_view name, Int v) {
    if constexpr (std::is_signed_v<Int>) return put(name, static_cast<int64_t>(v));
    else return put(name, static_cast<uint64_t>(v));
  }
  LineOut& field(std::string_view name, double v) {
    if (!std::isfinite(v)) return null(name, details::not_finite_reason(v));
    return put(name, v);
  }
  /// An optional value: when empty, null with `reason`.
  template <class T>
  LineOut& field(std::string_view name, const std::optional<T>& v, std::string_view reason) {
    return v ? field(name, *v) : null(name, reason);
  }
  /// A value or why it is null, as one thing (core/measured.hpp).
  template <class T>
  LineOut& field(std::string_view name, const Measured<T>& v) {
    return v ? field(name, *v) : null(name, v.why());
  }
  /// A text that is empty when unknown: null with `reason` then.
  LineOut& optional_text(std::string_view name, const std::string& v, std::string_view reason) {
    return v.empty() ? null(name, reason) : field(name, v);
  }
  LineOut& null(std::string_view name, std::string_view reason) {
    ensure_record();
    if (dropped()) return *this;
    std::string path = member_path(name);
    const std::string* left = excluded(path);
    if (const details::RowTree* tree = levels_.back().tree) declared(*tree, tree->child(levels_.back().node, name), name, JsonLeaf{});
    w_.key(name).null();
    nulls_.emplace_back(std::move(path), left ? *left : std::string(reason));
    return *this;
  }
  // ---- members named by their row (core/line_rows.hpp): what the row does not take does not compile ----
  template <Record R, int32_t I, class V>
  LineOut& field(line_field::Row<R, I> r, const V& v) {
    static_assert(line_field::row_takes<V>(line_field::Row<R, I>::field().type), "this value's type is not the row's (core/line_fields*.hpp)");
    expect(R, I).field(r.name(), v);
    return expected();
  }
  template <Record R, int32_t I, class T>
  LineOut& field(line_field::Row<R, I> r, const std::optional<T>& v, std::string_view reason) {
    static_assert(line_field::row_takes<T>(line_field::Row<R, I>::field().type), "this value's type is not the row's (core/line_fields*.hpp)");
    static_assert(line_field::Row<R, I>::field().nulls == Nulls::possible, "the row is never null (core/line_fields*.hpp)");
    expect(R, I).field(r.name(), v, reason);
    return expected();
  }
  template <Record R, int32_t I, class T>
  LineOut& field(line_field::Row<R, I> r, const Measured<T>& v) {
    static_assert(line_field::row_takes<T>(line_field::Row<R, I>::field().type), "this value's type is not the row's (core/line_fields*.hpp)");
    static_assert(line_field::Row<R, I>::field().nulls == Nulls::possible, "the row is never null (core/line_fields*.hpp)");
    expect(R, I).field(r.name(), v);
    return expected();
  }
  template <Record R, int32_t I>
  LineOut& optional_text(line_field::Row<R, I> r, const std::string& v, std::string_view reason) {
    static_assert(line_field::Row<R, I>::field().type == FieldType::string, "the row is not a text (core/line_fields*.hpp)");
    static_assert(line_field::Row<R, I>::field().nulls == Nulls::possible, "the row is never null (core/line_fields*.hpp)");
    expect(R, I).optional_text(r.name(), v, reason);
    return expected();
  }
  template <Record R, int32_t I>
  LineOut& null(line_field::Row<R, I> r, std::string_view reason) {
    static_assert(line_field::Row<R, I>::field().nulls == Nulls::possible, "the row is never null (core/line_fields*.hpp)");
    expect(R, I).null(r.name(), reason);
    return expected();
  }
  template <Record R, int32_t I>
  LineOut& begin_object(line_field::Row<R, I> r) {
    static_assert(line_field::Row<R, I>::field().type == FieldType::object || line_field::Row<R, I>::field().type == FieldType::names,
                  "the row is not an object (core/line_fields*.hpp)");
    return placed(r).begin_object(r.name());
  }
  template <Record R, int32_t I>
  LineOut& begin_array(line_field::Row<R, I> r) {
    static_assert(line_field::Row<R, I>::field().type == FieldType::array, "the row is not an array (core/line_fields*.hpp)");
    return placed(r).begin_array(r.name());
  }

  /// Why a check left the member `name` of the open object out; null when it did not.
  const std::string* left_out_reason(std::string_view name) const {
    return excluded_ && !excluded_->empty() ? excluded(member_path(name)) : nullptr;
  }

  // ---- elements of the open array (never null) ----
  LineOut& element(std::string_view v) {
    ensure_record();
    if (dropped()) return *this;
    if (levels_.back().tree) declared_element(JsonLeaf{JsonLeaf::Kind::string, 0, details::JsonWriter::valid_utf8(v)});
    ++levels_.back().next_index;
    w_.value(v);
    return *this;
  }
  LineOut& element(const std::string& v) { return element(std::string_view(v)); }
  LineOut& element(const char* v) { return element(std::string_view(v)); }
  template <class T>
  LineOut& element(T) = delete;  // elements are texts and counts (int64_t) only
  LineOut& element(int64_t v) {
    ensure_record();
    if (dropped()) return *this;
    if (levels_.back().tree) declared_element(JsonLeaf{JsonLeaf::Kind::number, static_cast<double>(v), {}, true});
    ++levels_.back().next_index;
    w_.value(v);
    return *this;
  }

 private:
  /// A row's handle written as a member of the open container: where that member's node is not the
  /// row's own (the handle written in another container), counted with the undeclared values.
  /// One function for every handle (a template per handle would be ~300 copies of the lookup).
  template <Record R, int32_t I>
  LineOut& placed(line_field::Row<R, I> r) {
    return placed(R, I, r.name());
  }
  /// A value written through a handle: declared() checks its row against the one it finds anyway
  /// (placed()'s check without a second lookup); expected() ends the expectation, written or not.
  LineOut& expect(Record record, int32_t row) {
    expecting_ = true, expect_record_ = record, expect_row_ = row;
    return *this;
  }
  LineOut& expected() {
    expecting_ = false;
    return *this;
  }
  LineOut& placed(Record record, int32_t row, std::string_view name) {
    if (levels_.empty() || !levels_.back().tree || dropped()) return *this;
    const details::RowTree& tree = *levels_.back().tree;
    const details::RowTree::Node* n = tree.node(tree.child(levels_.back().node, name));
    if (tree.record() != record || !n || n->row != row) details::line_out_undeclared().fetch_add(1, std::memory_order_relaxed);
    return *this;
  }

  struct Level {
    std::size_t parent;  // path_'s length outside this container
    bool array;
    std::size_t next_index;
    bool dropped;  // left out by a check (or inside one that was): nothing of it is written
    int32_t node;                   // its node of `tree` (-1: none, or no rows given)
    const details::RowTree* tree;   // rows_, or the tree a node of it links to (RowTree::Node::link)
  };
  /// A value about to be written as the member `name` (or element) at node `node` of `tree`: checked
  /// against its row, and kept for the tiers when one of theirs (rows of the record's own tree).
  void declared(const details::RowTree& tree, int32_t node, std::string_view name, JsonLeaf leaf) {
    const bool null = leaf.kind == JsonLeaf::Kind::null;
    const details::RowTree::Node* n = tree.node(node);
    if (expecting_) {  // written through a handle: the row found must be the handle's
      expecting_ = false;
      if (tree.record() != expect_record_ || !n || n->row != expect_row_)
        details::line_out_undeclared().fetch_add(1, std::memory_order_relaxed);
    }
    // A null where no row is stands for the rows below it (an object absent whole).
    bool fits = n && (n->row >= 0 || (null && (!n->children.empty() || n->any >= 0)));
    if (fits && n->row >= 0) {
      const LineField& f = record_fields(tree.record())[static_cast<std::size_t>(n->row)];
      const ValueKind kind = null                                  ? ValueKind::null
                             : leaf.kind == JsonLeaf::Kind::boolean ? ValueKind::boolean
                             : leaf.kind == JsonLeaf::Kind::string  ? ValueKind::string
                                                                    : ValueKind::number;
      fits = value_fits(f, kind, leaf.integral);  // a null where the row is never null too
    }
    if (!fits) details::line_out_undeclared().fetch_add(1, std::memory_order_relaxed);
    if (!tiers_ || &tree != rows_) return;
    if (levels_.size() == 1 && name == "timestamp") tiers_->timestamp = leaf;
    if (levels_.size() == 1 && name == "global_step") tiers_->global_step = leaf;
    const int32_t compact = tree.tier_row(node, LineTier::compact, null), run = tree.tier_row(node, LineTier::run, null);
    if (compact < 0 && run < 0) return;
    TierLeaf t;
    t.row[static_cast<int>(LineTier::compact)] = compact;
    t.row[static_cast<int>(LineTier::run)] = run;
    t.names.reserve(names_.size() + 1);
    t.names = names_;
    t.names.push_back(details::JsonWriter::valid_utf8(name));
    t.leaf = std::move(leaf);
    tiers_->leaves.push_back(std::move(t));
  }
  void declared_element(JsonLeaf leaf) {
    const details::RowTree& tree = *levels_.back().tree;
    const int32_t node = tree.element(levels_.back().node);
    declared(tree, node, tiers_ ? std::to_string(levels_.back().next_index) : std::string(), std::move(leaf));
  }
  static JsonLeaf leaf_of(bool v) { return JsonLeaf{JsonLeaf::Kind::boolean, v ? 1.0 : 0.0, {}}; }
  static JsonLeaf leaf_of(std::string_view v) { return JsonLeaf{JsonLeaf::Kind::string, 0, details::JsonWriter::valid_utf8(v)}; }
  static JsonLeaf leaf_of(int64_t v) { return JsonLeaf{JsonLeaf::Kind::number, static_cast<double>(v), {}, true}; }
  static JsonLeaf leaf_of(uint64_t v) { return JsonLeaf{JsonLeaf::Kind::number, static_cast<double>(v), {}, true}; }
  static JsonLeaf leaf_of(double v) { return JsonLeaf{JsonLeaf::Kind::number, v, {}}; }
  std::string member_path(std::string_view name) const {
    std::string p = path_;
    if (!p.empty()) p += '.';
    p += details::path_segment(name);
    return p;
  }
  /// A writer that forgot begin(): the record is opened for it (counted), so the text stays an object.
  void ensure_record() {
    if (!levels_.empty()) return;
    details::line_out_unbalanced().fetch_add(1, std::memory_order_relaxed);
    begin();
  }
  /// Whether the filed null at `filed` is `path` or contains it (`a.b` covers `a.b.c`, not `a.bc`).
  static bool covers(const std::string& filed, const std::string& path) {
    return path.compare(0, filed.size(), filed) == 0 && (path.size() == filed.size() || path[filed.size()] == '.');
  }
  /// A container whose contents are not written (it was written null, or it lies inside one that was).
  LineOut& drop_level(bool array) {
    if (tiers_) names_.emplace_back();
    levels_.push_back({path_.size(), array, 0, true, -1, nullptr});
    return *this;
  }
  /// Whether the open container is one whose contents are not written (a level inside a dropped one is
  /// dropped too, so the innermost says it).
  bool dropped() const { return !levels_.empty() && levels_.back().dropped; }
  const std::string* excluded(const std::string& path) const {
    if (!excluded_) return nullptr;
    auto it = excluded_->find(path);
    return it == excluded_->end() ? nullptr : &it->second;
  }
  template <class V>
  LineOut& put(std::string_view name, const V& v) {
    ensure_record();
    if (dropped()) return *this;
    if (const std::string* why = left_out_reason(name)) return null(name, *why);
    if (const details::RowTree* tree = levels_.back().tree) declared(*tree, tree->child(levels_.back().node, name), name, leaf_of(v));
    w_.field(name, v);
    return *this;
  }
  LineOut& open(std::string_view name, bool array) {
    ensure_record();
    if (dropped()) return drop_level(array);
    if (left_out_reason(name)) {
      null(name, {});  // the check's reason
      return drop_level(array);
    }
    const std::size_t parent = path_.size();
    path_ = member_path(name);
    w_.key(name);
    if (array) w_.begin_array();
    else w_.begin_object();
    if (tiers_) names_.push_back(details::JsonWriter::valid_utf8(name));
    const details::RowTree* tree = levels_.back().tree;
    int32_t node = tree ? tree->child(levels_.back().node, name) : -1;
    if (const details::RowTree::Node* n = tree ? tree->node(node) : nullptr; n && n->link >= 0) tree = tree->linked(), node = n->link;
    levels_.push_back({parent, array, 0, false, node, tree});
    return *this;
  }
  LineOut& close() {
    if (levels_.size() <= 1) {  // the record's own level closes in finish() only
      details::line_out_unbalanced().fetch_add(1, std::memory_order_relaxed);
      return *this;
    }
    if (!levels_.back().dropped) {
      if (levels_.back().array) w_.end_array();
      else w_.end_object();
    }
    path_.resize(levels_.back().parent);
    levels_.pop_back();
    if (tiers_ && !names_.empty()) names_.pop_back();
    return *this;
  }

  details::JsonWriter w_;
  const std::map<std::string, std::string>* excluded_;
  const details::RowTree* rows_;
  TierLeaves* tiers_;
  std::vector<std::string> names_;  // the open containers' names, for tiers_ (an element's: its index)
  std::vector<std::pair<std::string, std::string>> nulls_;
  std::vector<Level> levels_;
  std::string path_;  // the open container's path ("" at the record's top level)
  bool expecting_ = false;  // expect(): the next value's row, as its handle named it
  Record expect_record_ = Record::step;
  int32_t expect_row_ = -1;
};

/// A built-in phase's host time (`forward_time_ms`, …, its row's handle): null, and why, when the phase
/// never opened.
template <class Handle>
inline void write_phase_field(LineOut& out, const StepLineInput& in, Handle name, PhaseId id) {
  auto it = in.host.phases.find(id);
  const auto v = it == in.host.phases.end() ? std::nullopt : std::optional<double>(ns_to_ms(it->second.total_ns));
  out.field(name, v,
            reason_text(Reason::phase_not_opened, phase_name(id)) + "' in this step" +
                (in.step->spans_dropped
                     ? " (" + std::to_string(in.step->spans_dropped) + " phase scopes were dropped: max_spans_per_step)"
                     : std::string()));
}

/// The last value recorded under `name` in the step.
inline std::optional<double> scalar(const StepRecord& step, const std::string& name) {
  std::optional<double> v;
  for (const auto& [n, x] : step.scalars)
    if (n == name) v = x;  // last record wins
  return v;
}

STEPTRACE_END_NAMESPACE  // steptrace
