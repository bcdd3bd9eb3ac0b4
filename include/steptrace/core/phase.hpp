// steptrace/core/phase.hpp - phase identities: six built-in phases plus user-named ones.
//
//   TRACE_PHASE(forward)            // built-in; a misspelling (TRACE_PHASE(forwrd)) does not compile
//   TRACE_PHASE_NAMED("attention")  // custom; registered once per call site
//
// Ids are small integers so a scope stores two bytes; names live in a fixed-size table that the
// background thread reads when it writes a line.
#pragma once
#include "../version.hpp"
#include <array>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

STEPTRACE_BEGIN_NAMESPACE

using PhaseId = uint16_t;
inline constexpr PhaseId kNoPhase = 0xFFFF;
inline constexpr std::size_t kMaxPhases = 64;

/// Built-in phases. The tag names are what TRACE_PHASE(...) accepts, so a typo is a compile error.
namespace phase_tag {
inline constexpr PhaseId input = 0;      // waiting for the data loader (dataloader_wait_ms)
inline constexpr PhaseId h2d = 1;        // host-to-device copies of the batch
inline constexpr PhaseId forward = 2;
inline constexpr PhaseId backward = 3;
inline constexpr PhaseId optimizer = 4;
inline constexpr PhaseId nccl = 5;       // explicit collective calls
}  // namespace phase_tag
inline constexpr PhaseId kBuiltinPhaseCount = 6;

namespace details {
struct PhaseTable {
  std::mutex mutex;  // taken only when registering a new name
  std::array<std::string, kMaxPhases> names{"input", "h2d", "forward", "backward", "optimizer", "nccl"};
  std::atomic<std::size_t> count{kBuiltinPhaseCount};
  std::atomic<std::size_t> rejected{0};  // registrations refused because the table was full
};
inline PhaseTable& phase_table() {
  static PhaseTable table;
  return table;
}
}  // namespace details

/// True when `name` is a usable phase name: 1..48 characters of [a-z0-9_.-], starting with a letter.
inline bool is_valid_phase_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 48 || !std::islower(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (!(std::islower(u) || std::isdigit(u) || c == '_' || c == '.' || c == '-')) return false;
  }
  return true;
}

/// Result of registering a phase name: the id, plus an error text when the name had to be changed.
struct PhaseRegistration {
  PhaseId id = kNoPhase;
  std::string error;  // empty when the name was accepted as written
};

/// Registers (or finds) a phase name. Invalid names are rewritten (lower-cased, other characters
/// replaced by '_') and reported in `error`; when the table is full the id is kNoPhase.
inline PhaseRegistration register_phase_checked(std::string_view name) {
  PhaseRegistration result;
  std::string clean;
  if (!is_valid_phase_name(name)) {
    for (char c : name.substr(0, 48)) {
      const auto u = static_cast<unsigned char>(c);
      clean += (std::isalnum(u) || c == '_' || c == '.' || c == '-') ? static_cast<char>(std::tolower(u)) : '_';
    }
    if (clean.empty() || !std::islower(static_cast<unsigned char>(clean[0]))) clean.insert(0, "p_");
    result.error = "phase name '" + std::string(name) +
                   "' is not [a-z][a-z0-9_.-]{0,47}; recorded as '" + clean + "'";
  } else {
    clean = std::string(name);
  }
  auto& table = details::phase_table();
  std::lock_guard<std::mutex> lock(table.mutex);
  const std::size_t n = table.count.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < n; ++i)
    if (table.names[i] == clean) {
      result.id = static_cast<PhaseId>(i);
      return result;
    }
  if (n >= kMaxPhases) {
    table.rejected.fetch_add(1, std::memory_order_relaxed);
    result.error = "phase table full (" + std::to_string(kMaxPhases) + " names); '" + clean + "' not recorded";
    return result;
  }
  table.names[n] = clean;
  table.count.store(n + 1, std::memory_order_release);
  result.id = static_cast<PhaseId>(n);
  return result;
}

/// Name of a registered phase, or "unknown".
inline const std::string& phase_name(PhaseId id) {
  auto& table = details::phase_table();
  static const std::string unknown = "unknown";
  if (id >= table.count.load(std::memory_order_acquire)) return unknown;
  return table.names[id];
}

inline std::size_t phase_count() { return details::phase_table().count.load(std::memory_order_acquire); }

STEPTRACE_END_NAMESPACE  // steptrace
