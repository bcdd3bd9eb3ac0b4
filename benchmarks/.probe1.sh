#!/usr/bin/env bash
# session 3 probe 1: GPU tests, the detach cycle, memory breakdown
set -uo pipefail
exec > >(tee "$OUT/log.txt") 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s)
scripts/test.sh --gpu 2>&1 | tail -15
echo "tests done $(( $(date +%s) - t0 )) s"
b=build/benchmarks
echo "== cupti_cycle 8 cycles x 10000 launches"; $b/cupti_cycle 8 10000 0
echo "== cupti_cycle with 20 ms of GPU work queued before the detach"; $b/cupti_cycle 4 10000 20000 | tail -2
echo "== memory (launch-bound, 50 timed steps)"
lb=(--workload launch --kernels 10000 --steps 50 --warmup 5)
run() { echo "$1: $(env "${@:2}" | grep -o 'step_ms=[^ ]*\|rss_hwm_kib=[^ ]*\|rss_kib=[^ ]*' | tr '\n' ' ')"; }
run baseline $b/step_workloads_baseline "${lb[@]}"
run gpu_off STEPTRACE_GPU=off STEPTRACE_LOG=/dev/null $b/step_workloads "${lb[@]}"
run host STEPTRACE_CUPTI=off STEPTRACE_LOG=/dev/null $b/step_workloads "${lb[@]}"
run raw_floor STEPTRACE_ENABLED=0 BENCH_RAW_CUPTI=records $b/step_workloads "${lb[@]}"
run full_counters_off STEPTRACE_COUNTERS=off STEPTRACE_LOG=$OUT/full_off.jsonl $b/step_workloads "${lb[@]}"
run full STEPTRACE_LOG=/dev/null $b/step_workloads "${lb[@]}"
python3 - "$OUT/full_off.jsonl" <<'PY'
import json,sys
L=[json.loads(l) for l in open(sys.argv[1])]
inc=[l['step'] for l in L if not l.get('gpu',{}).get('complete',True)]
print('lines',len(L),'incomplete steps',inc[:20], 'dropped', sum((l.get('gpu') or {}).get('dropped_records',0) or 0 for l in L))
print('first line gpu keys', sorted((L[-1].get('gpu') or {}).keys()))
PY
echo "== transformer, incomplete-line check"
STEPTRACE_LOG=$OUT/tf.jsonl $b/step_workloads --workload transformer --steps 30 --warmup 3 | tail -1
python3 -c "
import json;L=[json.loads(l) for l in open('$OUT/tf.jsonl')]
print('tf lines',len(L),'incomplete',[l['step'] for l in L if not (l.get('gpu') or {}).get('complete',True)])"
echo "total $(( $(date +%s) - t0 )) s"
