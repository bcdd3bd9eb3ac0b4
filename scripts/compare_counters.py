#!/usr/bin/env python3
"""PM sampling against ncu on the known kernels of counters_check (a markdown table).

    scripts/compare_counters.py PM_SAMPLING.json NCU.csv
"""
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
