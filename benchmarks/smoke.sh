#!/usr/bin/env bash
# A brief run of every benchmark binary (CTest gpu_benchmarks_smoke): each must run and print its
# result. Not a measurement.   benchmarks/smoke.sh BUILD_DIR
set -euo pipefail
b=${1:?build dir}/benchmarks
fail() { echo "smoke: $*" >&2; exit 1; }
"$b/scope_cost" 20000 | python3 -c 'import json, sys
b = json.load(sys.stdin)["batches"]
assert b["phase_scope_in_step"]["batches"] == 20 and b["two_tick_reads"]["batches"] == 20, b
assert b["scope_added_to_work_ns"] is not None and b["work_alone"]["ns_median"] > 0, b' || fail "scope_cost printed no whole result"
"$b/scope_cost" --steps 1 | grep -q "\"scope_clock\"" || fail "scope_cost --steps printed no clock"
[[ ! -x "$b/scope_cost_compiled" ]] || "$b/scope_cost_compiled" 20000 | grep -q "\"mode\":\"compiled\"" || fail "scope_cost_compiled printed no result"
for mode in none activity activity_api activity_callbacks steptrace_host steptrace steptrace_untraced context_disabled; do
  "$b/launch_cost" "$mode" 2000 | grep -q '"host_ns_per_launch"' || fail "launch_cost $mode"
done
"$b/cupti_cycle" 2 1000 | grep -q '"summary":true' || fail "cupti_cycle"
small_tf=(--workload transformer --layers 2 --batch 2 --seq 256 --dmodel 256 --steps 4 --warmup 1)
small_lb=(--workload launch --kernels 500 --steps 4 --warmup 1)
for args in small_tf small_lb; do
  declare -n a=$args
  "$b/step_workloads_baseline" "${a[@]}" | grep -q "^result .*build=baseline" || fail "baseline ${a[*]}"
  "$b/step_workloads_compiled_out" "${a[@]}" | grep -q "^result .*build=compiled_out" || fail "compiled_out ${a[*]}"
  for env in STEPTRACE_ENABLED=0 STEPTRACE_CUPTI=off STEPTRACE_TRACE_EVERY=1 STEPTRACE_TRACE_EVERY=2 \
    "STEPTRACE_TRACE_EVERY=2 STEPTRACE_UNTRACED_CUPTI=detach"; do
    log=$(mktemp)
    # shellcheck disable=SC2086  # $env holds one or two assignments
    env $env STEPTRACE_LOG="$log" "$b/step_workloads" "${a[@]}" | grep -q "^result .*build=instrumented" ||
      fail "$env ${a[*]}"
    lines=$(grep -vc '^{"event"' "$log" || true)  # step lines; a run's lines end with an end record
    [[ $env == STEPTRACE_ENABLED=0 ]] || grep -q '^{"event":"end".*"reason":"stop"' "$log" || fail "$env: no end record"
    if [[ $env == STEPTRACE_ENABLED=0 ]]; then [[ $lines == 0 ]] || fail "$env wrote $lines lines"
    else [[ $lines == 5 ]] || fail "$env ${a[*]}: $lines lines, expected 5"; fi
    rm -f "$log"
  done
  for raw in records records+callbacks callbacks; do
    STEPTRACE_ENABLED=0 BENCH_RAW_CUPTI=$raw "$b/step_workloads" "${a[@]}" --head-start-us 100 |
      grep -q "^result .*enqueue_mean_ms=" || fail "BENCH_RAW_CUPTI=$raw ${a[*]}"
  done
done
echo "smoke: every benchmark ran"
