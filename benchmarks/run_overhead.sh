#!/usr/bin/env bash
# Step-time cost of steptrace on whole training programs, modes interleaved in one run:
#   off   STEPTRACE_ENABLED=0 (the binary is instrumented, start() returns at once)
#   host  STEPTRACE_CUPTI=off (step + phase scopes, memory sampling, lines)
#   full  full CUPTI attribution
# Each program prints its own steady-state step time (steps 10..N, steady_clock), independent of
# steptrace. Prints one line per run: program mode repeat steady_step_ms.
#   benchmarks/run_overhead.sh REPEATS "PROGRAM ARGS" ["PROGRAM ARGS" ...]
set -uo pipefail
repeats=${1:?repeats}; shift
for r in $(seq "$repeats"); do
  for prog in "$@"; do
    for mode in off host full; do
      case $mode in
        off) env=(STEPTRACE_ENABLED=0) ;;
        host) env=(STEPTRACE_CUPTI=off) ;;
        full) env=() ;;
      esac
      ms=$(env "${env[@]}" STEPTRACE_SUMMARY=0 STEPTRACE_LOG=/tmp/overhead.jsonl $prog 2>/dev/null | awk '/^steady_step_ms/ {print $2}')
      echo "$(basename "${prog%% *}") $mode $r ${ms:-failed}"
    done
  done
done
