#!/usr/bin/env bash
# The cross-rank view on a multi-GPU host: examples/dp_train with one rank made slow in its input
# phase, then the cost of the gather (interleaved runs without it, every 5 and every step).
#   scripts/dp_validate.sh [OUT_DIR] [GPUS]
source "$(dirname "$0")/common.sh"
out=${1:-$ROOT/dp-validation}; gpus=${2:-2}
mkdir -p "$out"; out=$(cd "$out" && pwd)
export NCCL_NVLS_ENABLE=0  # no NVLink multicast (the device machines ask for it off)
install_dependencies
find_nccl
configure_and_build -DSTEPTRACE_BUILD_TESTS=OFF "${NCCL_ARGS[@]}" >/dev/null
bin=$BUILD_DIR/examples/dp_train
[[ -x $bin ]] || { echo "dp_train was not built (NCCL not found)"; exit 1; }

rm -f "$out"/slow-*.jsonl
STEPTRACE_SUMMARY=0 "$bin" --gpus "$gpus" --steps 60 --slow-rank $((gpus - 1)) --slow-phase input --slow-pct 30 \
  --cross-rank-every 5 --log "$out/slow-{rank}.jsonl" | tee "$out/slow.txt"
python3 - "$out" "$gpus" <<'PY'
import json, sys
out, gpus = sys.argv[1], int(sys.argv[2])
lines = [json.loads(l) for l in open(f"{out}/slow-0.jsonl")]
slow = gpus - 1
print("rank 0's cross_rank views (the slow rank is", slow, "from step 10):")
first = None
for l in lines:
    v = l.get("cross_rank")
    if not v:
        continue
    print(f"  line {l['global_step']:3d}: view of step {v['step']:3d} reporting {v['reporting']}/{v['world_size']} "
          f"slowest_rank {v.get('slowest_rank')} culprit {v.get('culprit_phase')} gap {v.get('culprit_gap_ms', 0):.2f} ms "
          f"skew {v.get('skew', 0):.3f} scores {[(s['rank'], round(s['score'], 3)) for s in v.get('lowest_scores', [])]}")
    if first is None and v["step"] >= 10 and v.get("slowest_rank") == slow and v.get("culprit_phase") == "input":
        first = (l["global_step"], v["step"])
print("first line naming the slow rank and the input phase:", first)
for r in range(gpus):
    ls = [json.loads(x) for x in open(f"{out}/slow-{r}.jsonl")]
    l = ls[len(ls) // 2]
    g = l.get("gpu") or {}
    print(f"rank {r} step {l['global_step']}: step_time_ms {l['step_time_ms']:.2f} input {l['dataloader_wait_ms']:.2f} "
          f"nccl phase {l['phases'].get('nccl', {}).get('host_ms', 0):.2f} ms | nccl_time_ms {l['nccl_time_ms']} "
          f"nccl_exposed_ms {g.get('nccl_exposed_ms')} nccl_overlap {g.get('nccl_overlap')} collectives {g.get('nccl_collectives')} "
          f"| rank {l['rank']} local_rank {l['local_rank']} world {l['world_size']} host {l['hostname']} device {(l.get('device') or {}).get('index')}")
PY
echo "overhead of the gather (steady_step_ms per rank, interleaved):"
for rep in 1 2 3; do
  for mode in off every5 every1; do
    case $mode in off) a=(--no-cross-rank) ;; every5) a=(--cross-rank-every 5) ;; every1) a=(--cross-rank-every 1) ;; esac
    r=$(STEPTRACE_SUMMARY=0 "$bin" --gpus "$gpus" --steps 80 --log /dev/null "${a[@]}" | sort | awk '/steady_step_ms/ {printf "%s ", $4}')
    echo "$mode $rep $r" | tee -a "$out/overhead.txt"
  done
done
