#!/usr/bin/env bash
set -uo pipefail
t0=$(date +%s)
MODES="baseline host cupti_floor full sampled sampled_detach" benchmarks/run_all.sh "$OUT/run-f" 5 transformer launch > "$OUT/run-f.log" 2>&1
tail -40 "$OUT/run-f.log"
echo "total $(( $(date +%s) - t0 )) s"
