// steptrace/core/phase.hpp - phase identities: six built-in phases plus user-named ones.
//
//   TRACE_PHASE(forward)            // built-in; a misspelling (TRACE_PHASE(forwrd)) does not compile
//   TRACE_PHASE_NAMED("attention")  // custom; registered once per call site
//
// Ids are small integers so a scope stores two bytes; names live in a fixed-size table that the
// background thread reads when it writes a line (phase_table.hpp: one per process, compiled once with
// the runtime).
#pragma once
#include "../version.hpp"
#include <cctype>
#include <cstdint>
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
  bool table_full = false;  // not recorded: the table holds kMaxPhases names already
};

#ifndef STEPTRACE_DISABLE

/// Registers (or finds) a phase name. Invalid names are rewritten (lower-cased, other characters
/// replaced by '_') and reported in `error`; when the table is full the id is kNoPhase.
STEPTRACE_API PhaseRegistration register_phase_checked(std::string_view name);

/// Name of a registered phase, or "unknown".
STEPTRACE_API const std::string& phase_name(PhaseId id);

STEPTRACE_API std::size_t phase_count();

/// Registrations of a new name refused since the process began because the table was full.
STEPTRACE_API std::size_t phase_names_rejected();

#else  // STEPTRACE_DISABLE: no table; nothing to link (api.hpp's no-ops, in the same namespace)

inline namespace disabled {
inline PhaseRegistration register_phase_checked(std::string_view) { return {}; }
inline const std::string& phase_name(PhaseId) {
  static const std::string* unknown = new std::string("unknown");  // never destroyed (statics rule)
  return *unknown;
}
inline std::size_t phase_count() { return 0; }
inline std::size_t phase_names_rejected() { return 0; }
}  // namespace disabled

#endif

STEPTRACE_END_NAMESPACE  // steptrace

