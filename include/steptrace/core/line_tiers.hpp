// steptrace/core/line_tiers.hpp - the compact line (schema "steptrace.step/2") and the run record
// (event "run"), both made from the values of their rows as the full line's writer wrote them
// (core/tier_leaves.hpp's TierLeaves, which LineOut fills in the same pass), or from a full line's
// leaves read back (a line given as text: tier_leaves_of). The line's declaration (core/line_fields.hpp)
// says which field goes where: its rows marked kCompact make the compact line (in their order), those
// marked kRun the run record; every other field is in the full line only (`line_detail=full`, schema
// "steptrace.step/1").
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "json_flat.hpp"
#include "json_writer.hpp"
#include "line_fields.hpp"
#include "reasons.hpp"
#include "tier_leaves.hpp"

STEPTRACE_BEGIN_NAMESPACE

inline constexpr const char* kCompactSchema = "steptrace.step/2";
inline constexpr const char* kRunSchema = "steptrace.run/2";
inline constexpr std::size_t kCompactMaxPhases = 16;    // phases kept by name, the rest folded into "(other)"
inline constexpr std::size_t kCompactMaxScalars = 32;   // scalars kept (by name order), the rest counted
inline constexpr std::size_t kMaxLineBytes = 16000;     // container runtimes split stdout lines past 16 KiB

namespace details {

/// A JSON pointer segment as the name it stands for (`~1` -> `/`, `~0` -> `~`).
inline std::string unescape_segment(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '~' && i + 1 < s.size()) {
      out += s[i + 1] == '1' ? '/' : '~';
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

/// Names as a `null_reasons` key: joined by `.`, a `.` or `\\` in a name escaped (line_out.hpp's rule).
inline std::string dotted_path(const std::vector<std::string>& names) {
  std::string dotted;
  for (const std::string& s : names) {
    if (!dotted.empty()) dotted += '.';
    for (char c : s) {
      if (c == '\\' || c == '.') dotted += '\\';
      dotted += c;
    }
  }
  return dotted;
}

/// A number as the compact tiers write it.
/// An integer a double holds exactly (|v| < 2^53): written as one, never rounded.
inline bool exact_integer(double v) { return std::fabs(v) < 9007199254740992.0 && std::floor(v) == v; }

/// A number as the compact tiers write it: an exact integer as it is (a count, bytes, tokens); else to
/// 6 significant digits, or down to the integer (a wall-clock time in ms: the full line's `timestamp`
/// truncates too). std::to_chars/from_chars: the program's locale cannot change them.
inline double rounded(double v, Digits d) {
  if (!std::isfinite(v) || exact_integer(v)) return v;
  if (d == Digits::integer) return std::floor(v);
  char buf[40];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 6);
  double out = v;
  std::from_chars(buf, r.ptr, out);
  return out;
}

/// An object of the record being built, its members in the order they were first added.
struct TierNode {
  std::vector<std::pair<std::string, TierNode>> members;
  std::optional<JsonLeaf> leaf;  // a value (null, boolean, number, string) rather than an object
  TierNode& member(const std::string& name) {
    for (auto& [k, v] : members)
      if (k == name) return v;
    members.emplace_back(name, TierNode{});
    return members.back().second;
  }
  void write(JsonWriter& w) const {
    if (leaf) {
      switch (leaf->kind) {
        case JsonLeaf::Kind::null: w.null(); break;
        case JsonLeaf::Kind::boolean: w.value(leaf->number != 0); break;
        case JsonLeaf::Kind::number:  // an exact integer as one: 100000, never 1e+05
          if (exact_integer(leaf->number)) w.value(static_cast<int64_t>(leaf->number));
          else w.value(leaf->number);
          break;
        case JsonLeaf::Kind::string: w.value(leaf->text); break;
      }
      return;
    }
    w.begin_object();
    for (const auto& [k, v] : members) {
      w.key(k);
      v.write(w);
    }
    w.end_object();
  }
};

/// FNV-1a (32 bits) of `text`, its digits left out unless `digits`, from `state` (FNV-1a's offset basis
/// and prime: Fowler, Noll, Vo; IETF draft-eastlake-fnv).
inline uint32_t fnv1a(std::string_view text, uint32_t state, bool digits = false) {
  uint32_t h = state;
  for (char c : text) {
    if (!digits && c >= '0' && c <= '9') continue;
    h ^= static_cast<unsigned char>(c);
    h *= 16777619u;
  }
  return h;
}
inline std::string hex8(uint32_t h) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%08x", h);
  return buf;
}
/// FNV-1a (32 bits) of `text` with its digits left out, from `state` (the offset basis: the code of a
/// sentence without a row), as 8 hex digits.
inline std::string reason_hash(std::string_view text, uint32_t state = 2166136261u) { return hex8(fnv1a(text, state)); }
/// A reason's code, 8 hex digits. A sentence without a row (core/reasons.hpp): reason_hash(sentence), so
/// a reason that names a number ("3 of 12 samples") keeps one code whatever the number. A row's sentence:
/// the row's code, which never changes when the sentence is reworded; a kPrefix row's sentence with a
/// detail: the hash of the detail continued from the row's code (FNV-1a runs left to right, and the code
/// is its state after the start as first worded, so the code is the whole sentence's as it was first
/// written, and stays so when the start is reworded): one code per detail, as each carries its own
/// sentence in `reason_text`. A kPrefixCounted row's detail begins with its count, whose digits are
/// hashed too (the rest's are left out, as any detail's): one code per count, the same on every rank
/// and run.
inline std::string reason_code(std::string_view sentence) {
  const ReasonRow* row = reason_of(sentence);
  if (!row) return reason_hash(sentence);
  if (row->match == reason_row::kWhole) return row->code;
  std::string_view detail = sentence.substr(std::strlen(row->sentence));
  uint32_t state = static_cast<uint32_t>(std::strtoul(row->code, nullptr, 16));
  if (row->match == reason_row::kPrefixCounted) {
    std::size_t n = 0;
    while (n < detail.size() && detail[n] >= '0' && detail[n] <= '9') ++n;
    state = fnv1a(detail.substr(0, n), state, /*digits=*/true);
    detail.remove_prefix(n);
  }
  return hex8(fnv1a(detail, state));
}

}  // namespace details

/// The reasons' sentences a run has written so far (code -> sentence): a compact line carries a
/// sentence only the first time its code appears in the run.
struct ReasonBook {
  std::unordered_map<std::string, std::string> written;
  std::vector<std::string> last_added;  // the codes the last compact line brought the sentence of
  /// The last line was not written: its sentences go with a later one.
  void unwrite_last() {
    for (const std::string& code : last_added) written.erase(code);
    last_added.clear();
  }
};

/// The values of the tiers' rows in a full line's leaves (a line given as text, read back by
/// core/json_flat.hpp): what LineOut hands over as it writes (core/tier_leaves.hpp).
inline TierLeaves tier_leaves_of(const FlatJson& full) {
  using namespace details;
  const RowTree& rows = RowTree::step();
  TierLeaves out;
  std::vector<std::string_view> segs;
  for (const auto& [pointer, leaf] : full) {
    pointer_segments_into(pointer, segs);
    if (segs.empty()) continue;
    if (segs[0] == "null_reasons") {
      if (segs.size() == 2 && leaf.kind == JsonLeaf::Kind::string) out.reasons[unescape_segment(segs[1])] = leaf.text;
      continue;
    }
    if (pointer == "/timestamp") out.timestamp = leaf;
    if (pointer == "/global_step") out.global_step = leaf;
    const int32_t node = rows.find(segs);
    const bool null = leaf.kind == JsonLeaf::Kind::null;
    const int32_t compact = rows.tier_row(node, LineTier::compact, null), run = rows.tier_row(node, LineTier::run, null);
    if (compact < 0 && run < 0) continue;
    TierLeaf t;
    t.row[static_cast<int>(LineTier::compact)] = compact;
    t.row[static_cast<int>(LineTier::run)] = run;
    for (auto sv : segs) t.names.push_back(unescape_segment(sv));
    t.leaf = leaf;
    out.leaves.push_back(std::move(t));
  }
  return out;
}

namespace details {
/// The values of `full`, one per path: the last written where a path came twice (two names that are
/// one once made valid UTF-8 - scalars "x\xff" and "x\xfe" both write "x\uFFFD" - as reading the text
/// back keeps the last). In the order of their paths.
inline std::vector<const TierLeaf*> last_of_each_path(const TierLeaves& full) {
  std::vector<const TierLeaf*> v;
  v.reserve(full.leaves.size());
  for (const TierLeaf& t : full.leaves) v.push_back(&t);
  std::stable_sort(v.begin(), v.end(), [](const TierLeaf* a, const TierLeaf* b) { return a->names < b->names; });
  std::vector<const TierLeaf*> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    if (i + 1 == v.size() || v[i + 1]->names != v[i]->names) out.push_back(v[i]);
  return out;
}

/// A leaf's JSON pointer (RFC 6901) from its names.
inline std::string pointer_of(const std::vector<std::string>& names) {
  std::string p;
  for (const std::string& n : names) {
    p += '/';
    for (char c : n) {
      if (c == '~') p += "~0";
      else if (c == '/') p += "~1";
      else p += c;
    }
  }
  return p;
}
}  // namespace details

/// The compact line of a full line's tier values (TierLeaves: from its writer, or tier_leaves_of a
/// line read back). `book`: the run's sentences so far (updated). `run_facts` (optional): the run
/// tier's values as one text, to tell a run record that changed (one pass for both).
inline std::string make_compact_line(const TierLeaves& full, ReasonBook& book, std::string* run_facts = nullptr) {
  using namespace details;
  constexpr int kCompactTier = static_cast<int>(LineTier::compact), kRunTier = static_cast<int>(LineTier::run);
  struct Kept {
    std::size_t row;
    const std::vector<std::string>* path;  // the TierLeaf's names
    JsonLeaf leaf;
    const std::vector<std::string>& names() const { return *path; }
  };
  std::vector<Kept> kept;
  book.last_added.clear();
  std::vector<std::string> facts;
  // diagnosis.label UNKNOWN: its reason goes as a code (below); with any other label, no reason.
  bool unknown = false;
  const std::vector<const TierLeaf*> leaves = last_of_each_path(full);
  for (const TierLeaf* t : leaves)
    if (t->names.size() == 2 && t->names[0] == "diagnosis" && t->names[1] == "label")
      unknown = t->leaf.kind == JsonLeaf::Kind::string && t->leaf.text == "UNKNOWN";
  for (const TierLeaf* tp : leaves) {
    const TierLeaf& t = *tp;
    const JsonLeaf& leaf = t.leaf;
    if (t.names.size() == 2 && t.names[0] == "diagnosis" && t.names[1] == "reason" &&
        (!unknown || leaf.kind != JsonLeaf::Kind::string))
      continue;
    if (run_facts && t.row[kRunTier] >= 0)
      facts.push_back(pointer_of(t.names) + (leaf.kind == JsonLeaf::Kind::string ? "=" + leaf.text
                                             : leaf.kind == JsonLeaf::Kind::null ? std::string("=null")
                                             : "=" + std::to_string(leaf.number)));
    const int32_t r = t.row[kCompactTier];
    if (r < 0) continue;
    Kept k{static_cast<std::size_t>(r), &t.names, leaf};
    if (k.leaf.kind == JsonLeaf::Kind::number) k.leaf.number = rounded(k.leaf.number, line_fields()[k.row].digits);
    kept.push_back(std::move(k));
  }
  const std::map<std::string, std::string>& reasons = full.reasons;  // null_reasons key -> sentence
  if (run_facts) {
    std::sort(facts.begin(), facts.end());
    run_facts->clear();
    for (const std::string& f : facts) (*run_facts += f) += '\n';
    // A null's reason is a fact too (a device found later changes it), when its field is the run
    // record's: not a step's value beside run fields (mfu_inputs.tokens_per_second_per_gpu, null on a
    // step without tokens, set on the next, made a new, identical record each time: issue #58).
    const RowTree& rows = RowTree::step();
    std::vector<std::string_view> key_segs;
    for (const auto& [key, why] : reasons) {
      key_segs.clear();
      for (std::size_t from = 0;;) {
        const std::size_t dot = key.find('.', from);
        key_segs.push_back(std::string_view(key).substr(from, dot == std::string::npos ? std::string::npos : dot - from));
        if (dot == std::string::npos) break;
        from = dot + 1;
      }
      if (rows.tier_row(rows.find(key_segs), LineTier::run, true) >= 0) (*run_facts += key + "=" + why) += '\n';
    }
  }
  // Phases: the kCompactMaxPhases with the most host time (then GPU time) by name; the rest summed
  // into "(other)" with their number. Scalars: the first kCompactMaxScalars by name; the rest counted.
  std::map<std::string, double> phase_weight;
  std::vector<std::string> scalar_names;
  for (const Kept& k : kept) {
    if (k.names().size() >= 2 && k.names()[0] == "phases") {
      double& w = phase_weight[k.names()[1]];
      if (k.leaf.kind == JsonLeaf::Kind::number && (k.names()[2] == "host_ms" || k.names().back() == "busy_ms"))
        w += std::fabs(k.leaf.number);
    } else if (k.names().size() == 2 && k.names()[0] == "scalars") {
      scalar_names.push_back(k.names()[1]);
    }
  }
  std::vector<std::pair<std::string, double>> by_weight(phase_weight.begin(), phase_weight.end());
  std::stable_sort(by_weight.begin(), by_weight.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::map<std::string, bool> phase_kept;
  for (std::size_t i = 0; i < by_weight.size(); ++i) phase_kept[by_weight[i].first] = i < kCompactMaxPhases;
  std::sort(scalar_names.begin(), scalar_names.end());
  const std::size_t scalars_left_out = scalar_names.size() > kCompactMaxScalars ? scalar_names.size() - kCompactMaxScalars : 0;
  if (scalars_left_out) scalar_names.resize(kCompactMaxScalars);
  std::map<std::string, double> other;  // field under phases/(other) -> sum
  std::size_t folded = 0;
  for (const auto& [name, keep] : phase_kept) folded += !keep;
  // Build in the table's order; phases and scalars by name.
  std::stable_sort(kept.begin(), kept.end(), [](const Kept& a, const Kept& b) {
    if (a.row != b.row) return a.row < b.row;
    return a.names() < b.names();
  });
  TierNode root;
  std::vector<std::string> nulls;  // pointers written null, for their reasons
  std::pair<std::string, std::string> diagnosis_text;  // an UNKNOWN reason's code and sentence, new this run
  for (const Kept& k : kept) {
    if (k.names().size() >= 2 && k.names()[0] == "phases" && !phase_kept[k.names()[1]]) {
      if (k.leaf.kind == JsonLeaf::Kind::number) {
        std::string field;
        for (std::size_t i = 2; i < k.names().size(); ++i) field += (field.empty() ? "" : "/") + k.names()[i];
        other[field] += k.leaf.number;
      }
      continue;
    }
    if (k.names().size() == 2 && k.names()[0] == "scalars" &&
        !std::binary_search(scalar_names.begin(), scalar_names.end(), k.names()[1]))
      continue;
    TierNode* n = &root;
    for (const std::string& s : k.names()) n = &n->member(s);
    n->leaf = k.leaf;
    if (k.names().size() == 1 && k.names()[0] == "schema") n->leaf->text = kCompactSchema;
    if (k.names().size() == 2 && k.names()[0] == "diagnosis" && k.names()[1] == "reason") {
      // An UNKNOWN line says why as a null does: the sentence's code, the sentence once per run.
      const std::string code = reason_code(k.leaf.text);
      if (book.written.emplace(code, k.leaf.text).second) {
        book.last_added.push_back(code);
        diagnosis_text = {code, k.leaf.text};
      }
      n->leaf->text = code;
    }
    if (k.leaf.kind == JsonLeaf::Kind::null) nulls.push_back(dotted_path(k.names()));
  }
  if (folded) {
    TierNode& o = root.member("phases").member("(other)");
    for (const auto& [field, sum] : other) {
      TierNode* n = &o;
      std::size_t i = 0;
      while (i <= field.size()) {
        const std::size_t j = field.find('/', i);
        n = &n->member(field.substr(i, (j == std::string::npos ? field.size() : j) - i));
        if (j == std::string::npos) break;
        i = j + 1;
      }
      n->leaf = JsonLeaf{JsonLeaf::Kind::number, rounded(sum, Digits::six), {}};
    }
    o.member("phases").leaf = JsonLeaf{JsonLeaf::Kind::number, static_cast<double>(folded), {}};
  }
  if (scalars_left_out)
    root.member("scalars_left_out").leaf = JsonLeaf{JsonLeaf::Kind::number, static_cast<double>(scalars_left_out), {}};
  // Reasons: a code per null written; the sentence the first time the run meets the code.
  TierNode codes, texts;
  for (const std::string& dotted : nulls) {
    const auto it = reasons.find(dotted);
    if (it == reasons.end()) continue;
    const std::string code = reason_code(it->second);
    codes.member(dotted).leaf = JsonLeaf{JsonLeaf::Kind::string, 0, code};
    if (book.written.emplace(code, it->second).second) {
      book.last_added.push_back(code);
      texts.member(code).leaf = JsonLeaf{JsonLeaf::Kind::string, 0, it->second};
    }
  }
  if (!diagnosis_text.first.empty())
    texts.member(diagnosis_text.first).leaf = JsonLeaf{JsonLeaf::Kind::string, 0, diagnosis_text.second};
  root.members.emplace_back("null_reasons", std::move(codes));
  if (!texts.members.empty()) root.members.emplace_back("reason_text", std::move(texts));
  JsonWriter w;
  root.write(w);
  std::string text = w.release();
  if (text.size() <= kMaxLineBytes) return text;
  // Over the bound (names of many kilobytes): phases and scalars out, said in the line.
  TierNode small;
  std::vector<std::string> still;  // the codes the cut line still carries
  if (!diagnosis_text.first.empty()) still.push_back(diagnosis_text.first);
  for (auto& [k, v] : root.members) {
    if (k == "phases" || k == "scalars") continue;
    if (k == "null_reasons") {
      TierNode rest;
      for (auto& [path, code] : v.members)
        if (path.rfind("phases.", 0) != 0 && path.rfind("scalars.", 0) != 0) {
          still.push_back(code.leaf->text);
          rest.members.emplace_back(path, std::move(code));
        }
      small.members.emplace_back(k, std::move(rest));
      continue;
    }
    if (k == "reason_text") {  // the sentences of the codes kept; the others are not written: unbook them
      TierNode rest;
      for (auto& [code, sentence] : v.members) {
        if (std::find(still.begin(), still.end(), code) != still.end()) {
          rest.members.emplace_back(code, std::move(sentence));
        } else {
          book.written.erase(code);
          book.last_added.erase(std::remove(book.last_added.begin(), book.last_added.end(), code), book.last_added.end());
        }
      }
      if (!rest.members.empty()) small.members.emplace_back(k, std::move(rest));
      continue;
    }
    small.members.emplace_back(k, std::move(v));
  }
  small.member("cut").leaf = JsonLeaf{JsonLeaf::Kind::string, 0,
                                      "phases and scalars left out: the line was over " + std::to_string(kMaxLineBytes) + " bytes"};
  JsonWriter w2;
  small.write(w2);
  return w2.release();
}

/// The run record of a full line's tier values: `{"event":"run","schema":"steptrace.run/2", ...}` with
/// the run tier's fields, their null reasons (sentences) and `settings` (name -> value in force).
/// `stamped`: with `from_step` and `timestamp`, the line's it precedes (without them: its facts alone,
/// the text to compare with the last record's).
inline std::string make_run_record(const TierLeaves& full, const std::vector<std::pair<std::string, std::string>>& settings,
                                   bool stamped = true) {
  using namespace details;
  constexpr int kRunTier = static_cast<int>(LineTier::run);
  TierNode root;
  root.member("event").leaf = JsonLeaf{JsonLeaf::Kind::string, 0, "run"};
  root.member("schema").leaf = JsonLeaf{JsonLeaf::Kind::string, 0, kRunSchema};
  // Each value of the run tier, under the first row it meets; written in the table's order, by name.
  std::vector<const TierLeaf*> found;
  for (const TierLeaf* t : last_of_each_path(full))
    if (t->row[kRunTier] >= 0) found.push_back(t);
  std::stable_sort(found.begin(), found.end(), [](const TierLeaf* a, const TierLeaf* b) {
    return a->row[kRunTier] != b->row[kRunTier] ? a->row[kRunTier] < b->row[kRunTier] : a->names < b->names;
  });
  std::vector<std::string> nulls;
  for (const TierLeaf* t : found) {
    TierNode* n = &root;
    for (const std::string& s : t->names) n = &n->member(s);
    JsonLeaf l = t->leaf;
    if (l.kind == JsonLeaf::Kind::number) l.number = rounded(l.number, line_fields()[static_cast<std::size_t>(t->row[kRunTier])].digits);
    if (l.kind == JsonLeaf::Kind::null) nulls.push_back(dotted_path(t->names));
    n->leaf = std::move(l);
  }
  TierNode& set = root.member("settings");
  for (const auto& [name, value] : settings) set.member(name).leaf = JsonLeaf{JsonLeaf::Kind::string, 0, value};
  TierNode& why = root.member("null_reasons");
  for (const std::string& dotted : nulls) {
    const auto it = full.reasons.find(dotted);
    if (it != full.reasons.end()) why.member(dotted).leaf = JsonLeaf{JsonLeaf::Kind::string, 0, it->second};
  }
  if (stamped) {
    root.member("from_step").leaf = full.global_step ? *full.global_step : JsonLeaf{};
    root.member("timestamp").leaf = full.timestamp ? *full.timestamp : JsonLeaf{};
  }
  JsonWriter w;
  root.write(w);
  return w.release();
}

/// make_compact_line and make_run_record of a full line's leaves (a line given as text, read back).
inline std::string make_compact_line(const FlatJson& full, ReasonBook& book, std::string* run_facts = nullptr) {
  return make_compact_line(tier_leaves_of(full), book, run_facts);
}
inline std::string make_run_record(const FlatJson& full, const std::vector<std::pair<std::string, std::string>>& settings,
                                   bool stamped = true) {
  return make_run_record(tier_leaves_of(full), settings, stamped);
}

STEPTRACE_END_NAMESPACE  // steptrace
