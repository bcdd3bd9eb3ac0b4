#!/usr/bin/env bash
set -uo pipefail
t0=$(date +%s)
BENCH_CPUS=2-9 MODES="baseline host sampled sampled_detach" benchmarks/run_all.sh "$OUT/run-g" 5 launch > "$OUT/run-g.log" 2>&1
echo "launch done $(( $(date +%s) - t0 )) s"
GPT_STEPS=200 BENCH_CPUS=2-9 GPT_MODES="off full sampled sampled_detach" benchmarks/run_all.sh "$OUT/run-g" 5 gpt >> "$OUT/run-g.log" 2>&1
tail -32 "$OUT/run-g.log"
echo "total $(( $(date +%s) - t0 )) s"
