#!/usr/bin/env bash
# Interleaved repetitions of every launch_cost mode; prints one JSON line per run.
#   benchmarks/run_launch_cost.sh BUILD_DIR [repeats] [launches]
set -euo pipefail
bin=${1:?build dir}/benchmarks/launch_cost
for r in $(seq "${2:-5}"); do
  for mode in ${LAUNCH_COST_MODES:-none activity activity_api activity_callbacks steptrace_host steptrace steptrace_untraced activity_disabled subscribed_disabled finalized}; do
    "$bin" "$mode" "${3:-50000}" | sed "s/^{/{\"repeat\":$r,/"
  done
done
