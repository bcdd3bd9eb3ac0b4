// steptrace/core/capture_request.hpp - an operator's request for captures of a running job
// (`steptrace-ctl capture --steps N`), as the file it leaves in the trace directory, and the rule that
// turns a request seen on any rank into the same steps on every rank. Pure C++17; tested without a GPU.
//
// The request file, `steptrace-request-<id>.json` (schema steptrace.request/1, written atomically):
//   {"schema": "steptrace.request/1", "id": "<16 hex>", "run_ids": ["<16 hex>", ...], "steps": N,
//    "created_unix_s": <seconds>, "by": "<user@host>"}
// A rank acts on it when its run_id is listed. Refused, with a warning and an answer file: text that is
// not such an object, an id or run_id that is not 16 hex digits, steps outside 1..kMaxRequestSteps,
// a request older than kRequestStaleS or dated in the future by more than kRequestFutureS.
//
// The same steps on every rank (cross-rank exchange on): a rank that has a request puts its tag (the
// id's first 6 hex digits, exact in a float) and N in the summary it exchanges. Every rank gathers the
// same summaries, and the rule reads nothing else (no rank's own step count or settings), so every rank
// reaches the same plan (the rule rank 0 would apply; no second collective): in the first gathered
// view that carries a tag not yet planned, the lowest rank's tag wins; k = the lowest valid rank's
// summarised step; its N steps start at S = k + margin. The margin covers how far the training threads
// run ahead of the gathered view: each rank reports its lag (steps between the step it posted and the
// step its training thread was at when the view came back) and its exchange cadence, and
//   margin = clamp(max(kMinCaptureMargin, 2 x every, 2 x largest lag + every), ..., kMaxCaptureMargin)
// (every: the largest cadence reported). S is a global_step: ranks that number their steps alike (as
// the cross-rank view assumes) capture the same steps. A rank whose summary is missing from the view,
// or names another step, is listed as absent; it captures S... all the same when it learns the plan.
#pragma once
#include "../version.hpp"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cross_rank.hpp"
#include "json_flat.hpp"

STEPTRACE_BEGIN_NAMESPACE

inline constexpr int kMaxRequestSteps = 64;                // steps one request may ask for
inline constexpr double kRequestStaleS = 300;              // older requests are refused
inline constexpr double kRequestFutureS = 60;              // dated this far ahead: refused (a wrong clock)
inline constexpr std::size_t kMaxRequestBytes = 128 * 1024;  // a request file larger than this is refused (4096 run_ids fit)
inline constexpr std::size_t kMaxRequestRunIds = 4096;
inline constexpr std::size_t kMaxRequestKeyBytes = 64;    // the request's keys are short words

/// The leaves a request is read for; any other field is checked as JSON and dropped unstored.
inline bool request_leaf(std::string_view p) {
  if (p == "/schema" || p == "/id" || p == "/steps" || p == "/created_unix_s" || p == "/by") return true;
  constexpr std::string_view runs = "/run_ids/";
  return p.substr(0, runs.size()) == runs && p.find('/', runs.size()) == std::string_view::npos;
}
inline constexpr int64_t kMinCaptureMargin = 8;
inline constexpr int64_t kMaxCaptureMargin = 1000;

struct CaptureRequest {
  std::string id;                    // 16 hex digits
  std::vector<std::string> run_ids;  // the runs it is for
  int steps = 0;
  double created_unix_s = 0;
  std::string by;
  bool for_run(const std::string& run_id) const {
    return std::find(run_ids.begin(), run_ids.end(), run_id) != run_ids.end();
  }
};

inline bool is_hex16(const std::string& s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

/// The tag a request travels under in the exchange: the id's first 6 hex digits (exact in a float;
/// 0 means none, so a 0 tag becomes 1).
inline uint32_t request_tag(const std::string& id) {
  uint32_t t = 0;
  for (std::size_t i = 0; i < 6 && i < id.size(); ++i) {
    const char c = id[i];
    t = t * 16 + static_cast<uint32_t>(c >= 'a' ? c - 'a' + 10 : c - '0');
  }
  return t == 0 ? 1 : t;
}
inline std::string tag_hex(uint32_t tag) {
  static const char* kHex = "0123456789abcdef";
  std::string s(6, '0');
  for (int i = 5; i >= 0; --i, tag >>= 4) s[static_cast<std::size_t>(i)] = kHex[tag & 15u];
  return s;
}

/// Reads a request file's text. "" with `out` filled, or why it is refused. `now_unix_s`: the clock.
inline std::string parse_capture_request(const std::string& text, double now_unix_s, CaptureRequest& out) {
  if (text.size() > kMaxRequestBytes) return "larger than " + std::to_string(kMaxRequestBytes) + " bytes";
  FlatJson j;
  // Bounded whatever the text's shape: keys of kMaxRequestKeyBytes at most, only the request's own
  // leaves stored, at most twice as many run_ids as allowed (the count is refused below with its reason).
  JsonFlattenLimits limits;
  limits.max_key_bytes = kMaxRequestKeyBytes;
  limits.max_leaves = 2 * kMaxRequestRunIds + 8;
  limits.keep = &request_leaf;
  details::JsonFlattener reader(text, j, limits);
  if (std::string err = reader.run(); !err.empty())
    return (reader.limited() ? "not a request (" : "not JSON (") + err + ")";
  auto str = [&](const char* key) -> const JsonLeaf* {
    auto it = j.find(key);
    return it != j.end() && it->second.kind == JsonLeaf::Kind::string ? &it->second : nullptr;
  };
  auto num = [&](const char* key) -> const JsonLeaf* {
    auto it = j.find(key);
    return it != j.end() && it->second.kind == JsonLeaf::Kind::number ? &it->second : nullptr;
  };
  const JsonLeaf* schema = str("/schema");
  if (!schema || schema->text != "steptrace.request/1") return "schema is not \"steptrace.request/1\"";
  const JsonLeaf* id = str("/id");
  if (!id || !is_hex16(id->text)) return "id is not 16 lowercase hex digits";
  out.id = id->text;
  out.run_ids.clear();
  for (std::size_t i = 0;; ++i) {
    auto it = j.find("/run_ids/" + std::to_string(i));
    if (it == j.end()) break;
    if (it->second.kind != JsonLeaf::Kind::string || !is_hex16(it->second.text))
      return "run_ids[" + std::to_string(i) + "] is not a run_id (16 lowercase hex digits)";
    if (out.run_ids.size() >= kMaxRequestRunIds) return "more than " + std::to_string(kMaxRequestRunIds) + " run_ids";
    out.run_ids.push_back(it->second.text);
  }
  if (out.run_ids.empty()) return "run_ids names no run";
  const JsonLeaf* steps = num("/steps");
  if (!steps || steps->number != std::floor(steps->number) || steps->number < 1 || steps->number > kMaxRequestSteps)
    return "steps is not a whole number in 1.." + std::to_string(kMaxRequestSteps);
  out.steps = static_cast<int>(steps->number);
  const JsonLeaf* created = num("/created_unix_s");
  if (!created || !std::isfinite(created->number)) return "created_unix_s is not a number";
  out.created_unix_s = created->number;
  if (now_unix_s - out.created_unix_s > kRequestStaleS)
    return "stale: created " + std::to_string(static_cast<long long>(now_unix_s - out.created_unix_s)) +
           " s ago (requests older than " + std::to_string(static_cast<int>(kRequestStaleS)) + " s are refused)";
  if (out.created_unix_s - now_unix_s > kRequestFutureS) return "created in the future (the writer's clock is ahead)";
  const JsonLeaf* by = str("/by");
  out.by = by ? by->text.substr(0, 200) : std::string();
  return {};
}

/// The steps every rank captures for one request.
struct CapturePlan {
  uint32_t tag = 0;
  int steps = 0;
  int64_t first_step = 0;          // S
  int64_t view_step = 0;           // the gathered step it was decided on
  int64_t margin = 0;
  int asked_by_rank = -1;          // the lowest rank whose summary carried the tag
  std::vector<int> absent_ranks;   // no valid summary of that step in the view
  int64_t last_step() const { return first_step + steps - 1; }
};

/// The rule above, on one gathered view (every rank's summary, rank order). `planned`: the tags
/// planned before (the same list on every rank, since every rank sees the same views).
inline std::optional<CapturePlan> plan_capture(const std::vector<RankSummary>& ranks, const std::vector<uint32_t>& planned) {
  std::optional<CapturePlan> plan;
  int64_t lag = 0, every = 1, step = -1;
  std::vector<int> absent;
  for (const RankSummary& s : ranks)
    if (s.valid) {
      step = s.step;  // the lowest valid rank's
      break;
    }
  for (std::size_t k = 0; k < ranks.size(); ++k) {
    const RankSummary& s = ranks[k];
    if (!s.valid || s.step != step) {
      absent.push_back(static_cast<int>(k));
      continue;
    }
    lag = std::max<int64_t>(lag, s.lag_steps);
    every = std::max<int64_t>(every, s.every);
    if (plan || s.ask_tag == 0 || s.ask_steps < 1) continue;
    if (std::find(planned.begin(), planned.end(), s.ask_tag) != planned.end()) continue;
    plan = CapturePlan{};
    plan->tag = s.ask_tag;
    plan->steps = std::min(s.ask_steps, kMaxRequestSteps);
    plan->asked_by_rank = static_cast<int>(k);
  }
  if (!plan) return std::nullopt;
  plan->margin = std::clamp(std::max({kMinCaptureMargin, 2 * every, 2 * lag + every}), kMinCaptureMargin, kMaxCaptureMargin);
  plan->view_step = step;
  plan->first_step = step + plan->margin;
  plan->absent_ranks = std::move(absent);
  return plan;
}

STEPTRACE_END_NAMESPACE  // steptrace
