#!/usr/bin/env bash
set -uo pipefail
exec > >(tee "$OUT/log.txt") 2>&1
t0=$(date +%s)
scripts/test.sh --gpu 2>&1 | tail -12
echo "tests done $(( $(date +%s) - t0 )) s"
cp build/tests/gpu_workloads_detached*.json* "$OUT/" 2>/dev/null
b=build/benchmarks
lb=(--workload launch --kernels 10000 --steps 100 --warmup 10)
for r in 1 2 3; do
  for m in baseline sampled sampled_detach full; do
    env=(STEPTRACE_LOG=/dev/null STEPTRACE_SUMMARY=0) exe=$b/step_workloads
    case $m in baseline) exe=$b/step_workloads_baseline ;; sampled) env+=(STEPTRACE_TRACE_EVERY=50) ;;
      sampled_detach) env+=(STEPTRACE_TRACE_EVERY=50 STEPTRACE_UNTRACED_CUPTI=detach) ;; esac
    [[ $m == sampled_detach && $r == 1 ]] && env[0]=STEPTRACE_LOG=$OUT/detach_lb.jsonl
    echo "$r $m $(env "${env[@]}" $exe "${lb[@]}" 2>&1 | grep '^result' | grep -o 'mean_ms=[^ ]*\|traced_mean_ms=[^ ]*\|untraced_mean_ms=[^ ]*' | tr '\n' ' ')"
  done
done
echo "total $(( $(date +%s) - t0 )) s"
