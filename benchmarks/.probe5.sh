#!/usr/bin/env bash
set -uo pipefail
t0=$(date +%s)
benchmarks/run_all.sh "$OUT/run-h" 5 scope memory > "$OUT/run-h.log" 2>&1
echo "scope+memory done $(( $(date +%s) - t0 )) s"; tail -5 "$OUT/run-h/runs.csv"
b=build-bench/benchmarks
STEPTRACE_LOG=/dev/null $b/step_workloads --workload launch --kernels 10000 --steps 20 --warmup 2 2>&1 | grep -i "hardware counters"
for e in 10 50; do
  STEPTRACE_TRACE_EVERY=$e STEPTRACE_UNTRACED_CUPTI=detach STEPTRACE_LOG=$OUT/gpt_detach_$e.jsonl STEPTRACE_SUMMARY=0 taskset -c 2-9 build-torch/examples/gpt_train --steps 200 2>&1 | grep steady_step_ms
done
STEPTRACE_ENABLED=0 taskset -c 2-9 build-torch/examples/gpt_train --steps 200 2>&1 | grep steady_step_ms
echo "gpt done $(( $(date +%s) - t0 )) s"
scripts/test.sh --gpu --sanitize > "$OUT/sanitize.log" 2>&1; echo "sanitize rc=$?"
grep -E "Passed|Failed|SUMMARY|line says|tests passed" "$OUT/sanitize.log"
echo "total $(( $(date +%s) - t0 )) s"
