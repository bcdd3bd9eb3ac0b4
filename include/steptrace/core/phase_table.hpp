// steptrace/core/phase_table.hpp - the process's table of phase names behind phase.hpp's functions
// (defined in details/phase_api_impl.hpp, compiled once with the runtime: one table per process, shared
// by a program and every shared object linking the compiled library).
#pragma once
#include "../version.hpp"
#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "phase.hpp"

STEPTRACE_BEGIN_NAMESPACE

namespace details {
struct PhaseTable {
  std::mutex mutex;  // taken only when registering a new name
  std::array<std::string, kMaxPhases> names{"input", "h2d", "forward", "backward", "optimizer", "nccl"};
  std::atomic<std::size_t> count{kBuiltinPhaseCount};
  std::atomic<std::size_t> rejected{0};  // registrations refused because the table was full
};
// Never destroyed: a program that returns from main without stop() still has the background thread
// writing lines while static destructors run, and it reads phase names (issue #17: a freed table
// turned custom names into garbage).
inline PhaseTable& phase_table() {
  static PhaseTable* table = new PhaseTable;
  return *table;
}

}  // namespace details

STEPTRACE_END_NAMESPACE  // steptrace
