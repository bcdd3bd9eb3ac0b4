// steptrace/details/phase_api_impl.hpp - the definitions of phase.hpp's functions over the process's
// phase table (core/phase_table.hpp). Part of the runtime's one implementation (details/api_impl.hpp):
// never included by a program's other translation units.
#pragma once
#include "../version.hpp"
#include <cctype>
#include <mutex>
#include <string>
#include <string_view>

#include "../core/phase.hpp"
#include "../core/phase_table.hpp"
#include "../core/printable.hpp"

STEPTRACE_BEGIN_NAMESPACE

PhaseRegistration register_phase_checked(std::string_view name) {
  PhaseRegistration result;
  std::string clean;
  if (!is_valid_phase_name(name)) {
    for (char c : name.substr(0, 48)) {
      const auto u = static_cast<unsigned char>(c);
      clean += (std::isalnum(u) || c == '_' || c == '.' || c == '-') ? static_cast<char>(std::tolower(u)) : '_';
    }
    if (clean.empty() || !std::islower(static_cast<unsigned char>(clean[0]))) clean.insert(0, "p_");
    result.error = "phase name '" + details::printable(name) +
                   "' is not [a-z][a-z0-9_.-]{0,47}; recorded as '" + clean + "'";
  } else {
    clean = std::string(name);
  }
  // The lines' own keys: launches outside any phase, and a phase id out of range.
  if (clean == "unphased" || clean == "unknown" || clean.rfind("unknown.", 0) == 0) {
    result.error = "phase name '" + clean + "' is reserved (the lines use it for launches outside any phase); recorded as 'p_" +
                   clean + "'";
    clean.insert(0, "p_");
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
    result.error = "phase table full (" + std::to_string(kMaxPhases) + " names); '" + clean +
                   "' and any later new name not recorded (counted in each line's dropped.phase_names_total)";
    result.table_full = true;
    return result;
  }
  table.names[n] = clean;
  table.count.store(n + 1, std::memory_order_release);
  result.id = static_cast<PhaseId>(n);
  return result;
}

const std::string& phase_name(PhaseId id) {
  auto& table = details::phase_table();
  static const std::string* unknown = new std::string("unknown");  // never destroyed, as the table
  if (id >= table.count.load(std::memory_order_acquire)) return *unknown;
  return table.names[id];
}

std::size_t phase_count() { return details::phase_table().count.load(std::memory_order_acquire); }

std::size_t phase_names_rejected() {
  return details::phase_table().rejected.load(std::memory_order_relaxed);
}

STEPTRACE_END_NAMESPACE  // steptrace
