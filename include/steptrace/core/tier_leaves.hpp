// steptrace/core/tier_leaves.hpp - the step line's declaration as a tree the writer walks (RowTree):
// LineOut (core/line_out.hpp) finds each value's row as it writes it, checks the value against the
// row, and hands the values of the compact line's and the run record's rows to core/line_tiers.hpp
// as they are written (TierLeaves) - the tiers are made in the same pass as the full line, without
// reading its leaves back by pointer and matching them against the rows.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "json_flat.hpp"
#include "line_fields.hpp"

STEPTRACE_BEGIN_NAMESPACE

/// The tiers a field can go to besides the full line (core/line_tiers.hpp).
enum class LineTier : uint8_t { compact, run };

namespace details {

/// The rows of a record as a tree of their paths' segments: a node per segment, "*" (any name of a
/// `names` object, any array element) as a child of its own. A node knows its row (an index into
/// record_fields()) and, per tier, the row it stands for there: its own when the tier carries it,
/// and for a null the first of the tier's rows below it too (a null object stands for the fields it
/// would hold: core/line_tiers.hpp's rule).
class RowTree {
 public:
  struct Node {
    std::vector<std::pair<std::string_view, int32_t>> children;  // by name, sorted
    int32_t any = -1;                                            // the "*" child
    int32_t row = -1;                                            // the row declared here
    int32_t tier_row[2] = {-1, -1};                              // by LineTier: `row` when the tier carries it
    int32_t tier_below[2] = {-1, -1};                            // by LineTier: the tier's first row below
    int32_t link = -1;  // the node of linked() whose rows stand below this one (its own children: none)
  };
  static constexpr int32_t kRoot = 0;

  explicit RowTree(Record r) : record_(r) {
    nodes_.emplace_back();
    const auto& rows = record_fields(r);
    const auto& segs = record_field_segments(r);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      int32_t n = kRoot;
      std::vector<int32_t> above;  // the nodes above the row's own
      for (const std::string_view s : segs[i]) {
        above.push_back(n);
        n = add_child(n, s);
      }
      const int32_t row = static_cast<int32_t>(i);
      if (nodes_[n].row < 0) nodes_[n].row = row;  // a path declared twice: the first row (record_field_at's)
      for (const LineTier t : {LineTier::compact, LineTier::run}) {
        if (!(rows[i].tiers & tier_bit(t))) continue;
        const int k = static_cast<int>(t);
        if (nodes_[n].tier_row[k] < 0) nodes_[n].tier_row[k] = row;
        for (const int32_t a : above)
          if (nodes_[a].tier_below[k] < 0) nodes_[a].tier_below[k] = row;
      }
    }
  }
  Record record() const { return record_; }
  std::size_t size() const { return nodes_.size(); }
  /// The tree the `link` nodes point into (the end record's: the step line's), nullptr: none.
  const RowTree* linked() const { return linked_; }

  /// The child of `node` named `name` (its own, else the "*" one); -1: none, or `node` is -1.
  int32_t child(int32_t node, std::string_view name) const {
    if (node < 0) return -1;
    const Node& n = nodes_[node];
    const auto it = std::lower_bound(n.children.begin(), n.children.end(), name,
                                     [](const auto& c, std::string_view v) { return c.first < v; });
    if (it != n.children.end() && it->first == name) return it->second;
    return n.any;
  }
  /// The child standing for an array's element.
  int32_t element(int32_t node) const { return node < 0 ? -1 : nodes_[node].any; }
  const Node* node(int32_t n) const { return n < 0 ? nullptr : &nodes_[n]; }

  /// The row of tier `t` a value at node `n` belongs to (`null`: a null, standing for the rows below
  /// it too); -1: none.
  int32_t tier_row(int32_t n, LineTier t, bool null) const {
    if (n < 0) return -1;
    const int k = static_cast<int>(t);
    const int32_t own = nodes_[n].tier_row[k], below = null ? nodes_[n].tier_below[k] : -1;
    return own < 0 ? below : below < 0 ? own : std::min(own, below);
  }
  /// The node at `segs` from the top (pointer segments: a "*" row matches any), -1: none.
  template <class Segments>
  int32_t find(const Segments& segs) const {
    int32_t n = kRoot;
    for (const auto& s : segs) n = child(n, s);
    return n;
  }

  /// The step line's tree, made once and never destroyed (docs/architecture.md, "statics": the exit
  /// hook writes lines after static destructors have run).
  static const RowTree& step() {
    static const RowTree* t = new RowTree(Record::step);
    return *t;
  }
  /// The end record's tree (the same): its `after_last_step.gpu` holds what the step line's
  /// `between_steps.gpu` does, so that node links to the step tree's (core/line_fields.hpp's
  /// record_field_at() reads those rows there too).
  static const RowTree& end() {
    static const RowTree* t = [] {
      auto* made = new RowTree(Record::end);
      const int32_t at = made->find(std::vector<std::string_view>{"after_last_step", "gpu"});
      const RowTree& steps = step();
      if (at >= 0) {
        made->nodes_[static_cast<std::size_t>(at)].link = steps.find(std::vector<std::string_view>{"between_steps", "gpu"});
        made->linked_ = &steps;
      }
      return made;
    }();
    return *t;
  }
  /// The stall and resumed records' trees (the same; no links).
  static const RowTree& stall() {
    static const RowTree* t = new RowTree(Record::stall);
    return *t;
  }
  static const RowTree& resumed() {
    static const RowTree* t = new RowTree(Record::resumed);
    return *t;
  }
  /// Record r's tree.
  static const RowTree& of(Record r) {
    switch (r) {
      case Record::step: return step();
      case Record::end: return end();
      case Record::stall: return stall();
      case Record::resumed: break;
    }
    return resumed();
  }

 private:
  static uint8_t tier_bit(LineTier t) { return t == LineTier::compact ? line_field::kCompact : line_field::kRun; }
  int32_t add_child(int32_t n, std::string_view s) {
    if (s == "*") {
      if (nodes_[n].any < 0) {
        nodes_[n].any = static_cast<int32_t>(nodes_.size());
        nodes_.emplace_back();
      }
      return nodes_[n].any;
    }
    auto& c = nodes_[n].children;
    const auto it = std::lower_bound(c.begin(), c.end(), s, [](const auto& x, std::string_view v) { return x.first < v; });
    if (it != c.end() && it->first == s) return it->second;
    const int32_t made = static_cast<int32_t>(nodes_.size());
    c.insert(it, {s, made});
    nodes_.emplace_back();  // after the insert: `c` is nodes_[n]'s, which the emplace may move
    return made;
  }

  Record record_;
  std::vector<Node> nodes_;
  const RowTree* linked_ = nullptr;
};

/// Values a writer wrote that the declaration does not hold - no row at their path, or a row of
/// another type - counted by LineOut as it writes (a steptrace bug: the worker warns once; tests hold
/// it at 0).
inline std::atomic<uint64_t>& line_out_undeclared() {
  static std::atomic<uint64_t> n{0};
  return n;
}

}  // namespace details

/// A value of a tier's row, as the writer wrote it.
struct TierLeaf {
  int32_t row[2] = {-1, -1};       // by LineTier: its row there (an index into line_fields()), -1: none
  std::vector<std::string> names;  // its path's names (an array element's: its index)
  JsonLeaf leaf;
};

/// What the compact line and the run record are made of: the values of their rows, the line's null
/// reasons and the run record's stamp (its global_step and timestamp, whatever tiers carry them).
struct TierLeaves {
  std::vector<TierLeaf> leaves;                // in the order written
  std::map<std::string, std::string> reasons;  // `null_reasons`: dotted path -> sentence
  std::optional<JsonLeaf> global_step, timestamp;
};

STEPTRACE_END_NAMESPACE  // steptrace
