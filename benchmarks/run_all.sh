#!/usr/bin/env bash
# Every overhead measurement of benchmarks/README.md, on a GPU machine, modes interleaved run by run.
#   benchmarks/run_all.sh OUT_DIR [REPEATS] [PARTS...]
# PARTS (default all): scope launch_cost transformer launch memory gpt budget
# (budget: longer runs of the transformer and launch steps with the modes that the overhead budget
# is judged by, and its own estimate of its cost from the lines, budget.csv)
# MODES (environment) narrows the transformer and launch parts, e.g. MODES="baseline full";
# WORKLOAD_ARGS adds arguments to every step_workloads run (e.g. "--head-start-us 20000").
# GPT_STEPS (default 80; the first 10 are warm-up), GPT_MODES narrows the gpt part, and BENCH_CPUS (a
# taskset CPU list pinning each step_workloads and gpt run).
# Writes OUT_DIR/runs.csv (one row per run), scope_cost.jsonl, launch_cost.jsonl, and OUT_DIR/table.md
# (benchmarks/summarize.py). Builds into build-bench (Release); gpt needs python3 with torch.
source "$(dirname "$0")/../scripts/common.sh"
out=${1:?out dir}; repeats=${2:-5}; shift $(( $# >= 2 ? 2 : $# ))
parts=("$@"); ((${#parts[@]})) || parts=(scope launch_cost transformer launch memory gpt budget)
mkdir -p "$out"; out=$(cd "$out" && pwd)
want() { local p; for p in "${parts[@]}"; do [[ $p == "$1" ]] && return 0; done; return 1; }

install_dependencies
configure_and_build bench >/dev/null
bin=$ROOT/build-bench/benchmarks
csv=$out/runs.csv
[[ -f $csv ]] || echo "program,workload,mode,every,repeat,mean_ms,median_ms,p10_ms,p90_ms,traced_mean_ms,untraced_mean_ms,launches_per_step,rss_hwm_kib,steps,enqueue_mean_ms" >"$csv"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1; date -u +%F; } >"$out/device.txt"

# One run of step_workloads: PROGRAM MODE EVERY REPEAT ARGS... -> a CSV row.
workload_run() {
  local mode=$1 every=$2 r=$3; shift 3
  local exe=$bin/step_workloads env=(STEPTRACE_LOG=/dev/null STEPTRACE_SUMMARY=0)
  local lines=$out/lines/${mode}_${r}_$(date +%s%N).jsonl  # the budget modes' lines, kept per run
  local scraper=
  mkdir -p "$out/lines"
  case $mode in
    baseline) exe=$bin/step_workloads_baseline ;;
    compiled_out) exe=$bin/step_workloads_compiled_out ;;
    off) env+=(STEPTRACE_ENABLED=0) ;;
    host) env+=(STEPTRACE_CUPTI=off) ;;
    full) env+=(STEPTRACE_TRACE_EVERY=1) ;;
    full_nocounters) env+=(STEPTRACE_TRACE_EVERY=1 STEPTRACE_COUNTERS=off) ;;
    # The budget modes keep their lines in full (budget_estimate.py reads the accounting).
    budget) env=(STEPTRACE_LOG="$lines" STEPTRACE_LINE_DETAIL=full STEPTRACE_SUMMARY=0) ;;
    budget_keep) env=(STEPTRACE_LOG="$lines" STEPTRACE_LINE_DETAIL=full STEPTRACE_SUMMARY=0 STEPTRACE_UNTRACED_CUPTI=keep) ;;
    budget_nocounters) env=(STEPTRACE_LOG="$lines" STEPTRACE_LINE_DETAIL=full STEPTRACE_SUMMARY=0 STEPTRACE_COUNTERS=off) ;;
    budget_prom)  # the defaults with both Prometheus expositions at their busiest: the textfile rewritten
      # every 100 ms (the shortest allowed), the endpoint scraped 5 times a second
      env=(STEPTRACE_LOG="$lines" STEPTRACE_LINE_DETAIL=full STEPTRACE_SUMMARY=0 STEPTRACE_PROMETHEUS_TEXTFILE="$out/steptrace.prom"
           STEPTRACE_PROMETHEUS_EVERY_MS=100 STEPTRACE_PROMETHEUS_LISTEN=127.0.0.1:19464)
      python3 "$ROOT/benchmarks/scrape_loop.py" 127.0.0.1:19464 0.2 "$out/scrapes.txt" & scraper=$! ;;
    attached) env+=(STEPTRACE_TRACE_EVERY=1000000) ;;  # CUPTI kept attached, only step 0 traced: the residual
    attached_nocounters) env+=(STEPTRACE_TRACE_EVERY=1000000 STEPTRACE_COUNTERS=off) ;;
    sampled) env+=(STEPTRACE_TRACE_EVERY=$every) ;;
    sampled_detach) env+=(STEPTRACE_TRACE_EVERY=$every STEPTRACE_UNTRACED_CUPTI=detach) ;;
    cupti_floor) env+=(STEPTRACE_ENABLED=0 BENCH_RAW_CUPTI=records) ;;
    cupti_floor_callbacks) env+=(STEPTRACE_ENABLED=0 BENCH_RAW_CUPTI=records+callbacks) ;;
    cupti_callbacks) env+=(STEPTRACE_ENABLED=0 BENCH_RAW_CUPTI=callbacks) ;;
    full_quiet) env+=(STEPTRACE_TRACE_EVERY=1 STEPTRACE_COUNTERS=off STEPTRACE_MEMORY_SAMPLE_MS=1000) ;;
  esac
  local line pin=()
  [[ -n ${BENCH_CPUS:-} ]] && pin=(taskset -c "$BENCH_CPUS")
  line=$(env "${env[@]}" "${pin[@]}" "$exe" "$@" ${WORKLOAD_ARGS:-} 2>/dev/null | grep '^result ') || line=
  [[ -n $scraper ]] && kill "$scraper" 2>/dev/null
  [[ -n $line ]] || { echo "step_workloads,?,$mode,$every,$r,failed" >>"$csv"; return; }
  kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
  echo "step_workloads,$(kv workload),$mode,$every,$r,$(kv mean_ms),$(kv median_ms),$(kv p10_ms),$(kv p90_ms),$(kv traced_mean_ms),$(kv untraced_mean_ms),$(kv launches_per_step),$(kv rss_hwm_kib),$(kv steps),$(kv enqueue_mean_ms)" >>"$csv"
  # The budget's own view of what it cost over the timed steps (after --warmup).
  if [[ $mode == budget* ]]; then
    python3 "$ROOT/benchmarks/budget_estimate.py" "$lines" "$(kv workload)" "$r" "$(sed -n 's/.*--warmup \([0-9]*\).*/\1/p' <<<"$*")" "$mode" >>"$out/budget.csv"
  fi
}

if want scope; then
  for r in $(seq "$repeats"); do
    "$bin/scope_cost" 2000000 >>"$out/scope_cost.jsonl"
    STEPTRACE_CLOCK=steady "$bin/scope_cost" 2000000 >>"$out/scope_cost.jsonl"
    if [[ -x $bin/scope_cost_compiled ]]; then
      "$bin/scope_cost_compiled" 2000000 >>"$out/scope_cost.jsonl"
      STEPTRACE_CLOCK=steady "$bin/scope_cost_compiled" 2000000 >>"$out/scope_cost.jsonl"
    fi
  done
fi
if want launch_cost; then
  "$ROOT/benchmarks/run_launch_cost.sh" "$ROOT/build-bench" "$repeats" 50000 >>"$out/launch_cost.jsonl"
fi
if want transformer; then
  for r in $(seq "$repeats"); do
    for mode in ${MODES:-baseline compiled_out off host cupti_floor full sampled sampled_detach}; do
      workload_run "$mode" 10 "$r" --workload transformer --steps 30 --warmup 5
    done
  done
fi
if want launch; then
  for r in $(seq "$repeats"); do
    for mode in ${MODES:-baseline compiled_out off host cupti_floor full sampled sampled_detach}; do
      workload_run "$mode" 50 "$r" --workload launch --kernels 10000 --steps 100 --warmup 10
    done
  done
fi
if want budget; then  # BUDGET_WORKLOADS narrows it (transformer, launch), BUDGET_MODES the modes, BUDGET_STEPS/BUDGET_WARMUP the length
  for workload in ${BUDGET_WORKLOADS:-transformer launch}; do
    for r in $(seq "$repeats"); do
      for mode in ${BUDGET_MODES:-baseline cupti_floor full full_nocounters budget sampled}; do
        case $workload in
          transformer) workload_run "$mode" 10 "$r" --workload transformer --steps "${BUDGET_STEPS:-200}" --warmup "${BUDGET_WARMUP:-40}" ;;
          launch) workload_run "$mode" 10 "$r" --workload launch --kernels 10000 --steps "${BUDGET_STEPS:-200}" --warmup "${BUDGET_WARMUP:-40}" ;;
        esac
      done
    done
  done
fi
if want memory; then  # steptrace's host memory does not grow with the run: short and long runs, full attribution
  for steps in 50 400; do
    workload_run baseline 1 "mem$steps" --workload launch --kernels 10000 --steps "$steps" --warmup 5
    workload_run full 1 "mem$steps" --workload launch --kernels 10000 --steps "$steps" --warmup 5
  done
fi
if want gpt; then
  if ! python3 -c 'import torch' 2>/dev/null; then
    echo "run_all: no python3 torch; gpt part skipped" >&2
  else
    TORCH_PREFIX=$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)')
    export TORCH_PREFIX
    (cd "$ROOT" && cmake --preset torch >/dev/null && cmake --build build-torch --target steptrace_example_gpt >/dev/null)
    gpt=$ROOT/build-torch/examples/gpt_train
    for r in $(seq "$repeats"); do
      for mode in ${GPT_MODES:-off host full sampled sampled_detach torch_profiler}; do
        env=(STEPTRACE_LOG=/dev/null STEPTRACE_SUMMARY=0) args=(--steps "${GPT_STEPS:-80}")
        case $mode in
          off) env+=(STEPTRACE_ENABLED=0) ;;
          host) env+=(STEPTRACE_CUPTI=off) ;;
          sampled) env+=(STEPTRACE_TRACE_EVERY=10) ;;
          sampled_detach) env+=(STEPTRACE_TRACE_EVERY=10 STEPTRACE_UNTRACED_CUPTI=detach) ;;
          torch_profiler) env+=(STEPTRACE_ENABLED=0) args+=(--torch-profiler --kineto-trace /tmp/gpt_profile.json) ;;
        esac
        pin=(); [[ -n ${BENCH_CPUS:-} ]] && pin=(taskset -c "$BENCH_CPUS")
        ms=$(env "${env[@]}" "${pin[@]}" "$gpt" "${args[@]}" 2>/dev/null | sed -n 's/^steady_step_ms //p')
        echo "gpt_train,gpt,$mode,$([[ $mode == sampled* ]] && echo 10 || echo 1),$r,${ms:-failed},,,,,,,,$(( ${GPT_STEPS:-80} - 10 ))" >>"$csv"
      done
    done
  fi
fi
python3 "$ROOT/benchmarks/summarize.py" "$out" >"$out/table.md" && cat "$out/table.md"
