// steptrace/core/step_keys.hpp - the key GPU work is filed under when it is launched
// (details/launch_context.hpp's current_step()): a step's index (>= 0), -1 before the first step, and
// between_steps_key(N) from step N's scope end until the next step begins. Pure.
#pragma once
#include "../version.hpp"
#include <cstdint>

STEPTRACE_BEGIN_NAMESPACE

inline constexpr int64_t between_steps_key(int64_t after_step) { return -(after_step + 2); }
inline constexpr bool is_between_steps_key(int64_t key) { return key <= -2; }
/// The last step begun for a launch key (-1: none yet).
inline constexpr int64_t last_step_of_key(int64_t key) { return key >= -1 ? key : -key - 2; }
/// The step whose line reports work filed under `key`: itself; the first step's for work before it;
/// the next step's for work between two steps.
inline constexpr int64_t reporting_step_of_key(int64_t key) { return key >= 0 ? key : key == -1 ? 0 : -key - 1; }

static_assert(reporting_step_of_key(between_steps_key(4)) == 5 && last_step_of_key(between_steps_key(4)) == 4 &&
                  reporting_step_of_key(-1) == 0 && last_step_of_key(-1) == -1,
              "step keys");

STEPTRACE_END_NAMESPACE
