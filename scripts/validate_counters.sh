#!/usr/bin/env bash
# steptrace's PM-sampled counters against Nsight Compute on the same known kernels (GPU machine with
# ncu). Builds tests/counters_check, runs it with PM sampling, then under ncu (one launch of each
# kernel), and prints a table of both and their difference in percentage points.
#   scripts/validate_counters.sh [OUT_DIR]
source "$(dirname "$0")/common.sh"
out=${1:-$ROOT/counters-validation}; mkdir -p "$out"
install_dependencies
configure_and_build gpu >/dev/null
bin=$BUILD_DIR/tests/counters_check
"$bin" >"$out/pm_sampling.json"
metrics=sm__cycles_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
ncu --csv --metrics "$metrics" "$bin" --ncu >"$out/ncu.csv" 2>"$out/ncu.stderr" || {
  echo "ncu failed (see $out/ncu.stderr)"; tail -5 "$out/ncu.stderr"; exit 1; }
python3 "$ROOT/scripts/compare_counters.py" "$out/pm_sampling.json" "$out/ncu.csv" | tee "$out/comparison.md"
