#!/usr/bin/env bash
# steptrace's PM-sampled counters against Nsight Compute on the same known kernels (GPU machine with
# ncu). Builds tests/counters_check, runs it with PM sampling, then under ncu (one launch of each
# kernel), and prints a table of both and their difference in percentage points.
#   scripts/validate_counters.sh [OUT_DIR]
source "$(dirname "$0")/common.sh"
out=${1:-$ROOT/counters-validation}; mkdir -p "$out"
install_dependencies
configure_and_build -DSTEPTRACE_BUILD_TESTS=ON >/dev/null
bin=$BUILD_DIR/tests/counters_check
"$bin" >"$out/pm_sampling.json"
metrics=sm__cycles_active.avg.pct_of_peak_sustained_elapsed,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active
ncu --csv --metrics "$metrics" "$bin" --ncu >"$out/ncu.csv" 2>"$out/ncu.stderr" || {
  echo "ncu failed (see $out/ncu.stderr)"; tail -5 "$out/ncu.stderr"; exit 1; }
python3 - "$out/pm_sampling.json" "$out/ncu.csv" <<'PY' | tee "$out/comparison.md"
import csv, io, json, sys
pm = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
rows = list(csv.DictReader(io.StringIO(text[text.index('"ID"'):])))
kernel_of = {"one_block": "spin", "full_grid_fma": "fma_loop", "gemm_bf16": None, "d2d_copy": "copy_kernel"}
names = {"sm_active": "sm__cycles_active.avg.pct_of_peak_sustained_elapsed",
         "tensor_active": "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
         "dram": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
         "occupancy": "sm__warps_active.avg.pct_of_peak_sustained_active"}
print(f"Device: {pm['device']} ({pm['chip']}), PM sampling every {pm['interval_us']} us, {pm['samples']} samples\n")
print("| workload | metric | steptrace (PM sampling) | ncu | difference (points) |")
print("|---|---|---|---|---|")
worst = 0
for w, k in kernel_of.items():
    others = [v for v in kernel_of.values() if v]
    # cuBLAS's GEMM kernel: whatever is not one of the three kernels of counters_check
    mine = [r for r in rows if (k and k in r["Kernel Name"]) or (not k and not any(o in r["Kernel Name"] for o in others))]
    for field, metric in names.items():
        vals = [float(r["Metric Value"].replace(",", "")) for r in mine if r["Metric Name"] == metric]
        ours = pm["workloads"][w][field]
        if not vals or ours is None:
            print(f"| {w} | {field} | {ours} | {'—' if not vals else sum(vals)/len(vals):} | — |")
            continue
        ref = sum(vals) / len(vals)
        diff = 100 * ours - ref
        worst = max(worst, abs(diff)) if field != "occupancy" else worst
        print(f"| {w} | {field} | {100*ours:.2f} % | {ref:.2f} % | {diff:+.2f} |")
print(f"\nLargest difference over sm_active, tensor_active, dram: {worst:.2f} points (goal: within 5)")
PY
