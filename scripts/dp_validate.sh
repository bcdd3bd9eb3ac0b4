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
configure_and_build gpu -DSTEPTRACE_BUILD_TESTS=OFF "${NCCL_ARGS[@]}" >/dev/null
bin=$BUILD_DIR/examples/dp_train
[[ -x $bin ]] || { echo "dp_train was not built (NCCL not found)"; exit 1; }

rm -f "$out"/slow-*.jsonl
STEPTRACE_SUMMARY=0 STEPTRACE_LINE_DETAIL=full "$bin" --gpus "$gpus" --steps 60 --slow-rank $((gpus - 1)) --slow-phase input --slow-pct 30 \
  --cross-rank-every 5 --log "$out/slow-{rank}.jsonl" | tee "$out/slow.txt"
python3 "$ROOT/scripts/dp_views.py" "$out" "$gpus"
echo "overhead of the gather (steady_step_ms per rank, interleaved):"
for rep in 1 2 3; do
  for mode in off every5 every1; do
    case $mode in off) a=(--no-cross-rank) ;; every5) a=(--cross-rank-every 5) ;; every1) a=(--cross-rank-every 1) ;; esac
    r=$(STEPTRACE_SUMMARY=0 "$bin" --gpus "$gpus" --steps 80 --log /dev/null "${a[@]}" | sort | awk '/steady_step_ms/ {printf "%s ", $4}')
    echo "$mode $rep $r" | tee -a "$out/overhead.txt"
  done
done
