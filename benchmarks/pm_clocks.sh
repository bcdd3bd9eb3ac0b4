#!/usr/bin/env bash
# Does PM sampling (steptrace's hardware counters) lock or lower the SM clock while it runs? (issue #48)
#   benchmarks/pm_clocks.sh BIN_DIR OUT_DIR [REPEATS=3] [STEPS=200]
# Runs step_workloads --workload transformer (GPU-bound, every step traced) with the counters on
# (PM sampling every step) and off (STEPTRACE_COUNTERS=off), REPEATS times each, interleaved, while
# nvidia-smi logs the SM clock, its application and maximum clocks and the clock-event reasons every
# 20 ms. Per run: the step time's median, the SM clock's median and minimum over the run (nvidia-smi),
# and the median of the lines' NVML device_state.sm_clock_mhz_mean; OUT_DIR/pm_clocks.md has the table,
# OUT_DIR/pm_clocks_*.csv the clock log and OUT_DIR/pm_clocks_*.jsonl each run's lines.
set -uo pipefail
bin=${1:?usage: pm_clocks.sh BIN_DIR OUT_DIR [REPEATS] [STEPS]}
out=${2:?usage: pm_clocks.sh BIN_DIR OUT_DIR [REPEATS] [STEPS]}
repeats=${3:-3}
steps=${4:-200}
mkdir -p "$out"
fields=timestamp,clocks.sm,clocks.applications.graphics,clocks.max.sm,clocks_event_reasons.active,power.draw
if ! nvidia-smi --query-gpu=$fields --format=csv,noheader,nounits -c 1 >/dev/null; then
  echo "pm_clocks: nvidia-smi cannot report $fields on this machine" >&2
  exit 1
fi
rows=$out/pm_clocks_runs.txt
: >"$rows"
for r in $(seq "$repeats"); do
  for mode in on off; do
    tag=${mode}_$r
    log=$out/pm_clocks_$tag.jsonl
    smi=$out/pm_clocks_$tag.csv
    rm -f "$log" "$smi"  # steptrace appends to its log: one run per file
    nvidia-smi --query-gpu=$fields --format=csv,noheader,nounits -lms 20 >"$smi" 2>>"$out/pm_clocks_stderr.txt" &
    smi_pid=$!
    sleep 0.5
    env_counters=()
    [[ $mode == off ]] && env_counters=(STEPTRACE_COUNTERS=off)
    result=$(env STEPTRACE_LOG="$log" STEPTRACE_TRACE_EVERY=1 STEPTRACE_SUMMARY=0 "${env_counters[@]}" \
      timeout 120 "$bin/step_workloads" --workload transformer --layers 16 --warmup 30 --steps "$steps" 2>>"$out/pm_clocks_stderr.txt")
    sleep 0.3
    kill "$smi_pid" 2>/dev/null
    wait "$smi_pid" 2>/dev/null
    echo "run mode=$mode repeat=$r $result" | tee -a "$rows"
  done
done
python3 - "$out" "$rows" <<'EOF' | tee "$out/pm_clocks.md"
import glob, json, os, statistics, sys
out, rows = sys.argv[1], sys.argv[2]
print("| run | step median ms | SM clock MHz, median (nvidia-smi, 20 ms) | min | application clock | clock-event reasons seen | lines' NVML sm_clock_mhz_mean, median | counters in the lines |")
print("|---|---|---|---|---|---|---|---|")
for text in open(rows):
    kv = dict(x.split("=", 1) for x in text.split() if "=" in x)
    tag = f"{kv['mode']}_{kv['repeat']}"
    clocks, app, reasons = [], set(), set()
    def lines_of(path):
        try:
            return open(path).read().splitlines()
        except OSError:
            return []
    for line in lines_of(os.path.join(out, f"pm_clocks_{tag}.csv")):
        f = [x.strip() for x in line.split(",")]
        if len(f) < 6:
            continue
        try:
            clocks.append(float(f[1]))
            app.add(f[2])
            reasons.add(f[4])
        except ValueError:
            continue
    nvml, sampled = [], 0
    for line in lines_of(os.path.join(out, f"pm_clocks_{tag}.jsonl")):
        try:
            l = json.loads(line)
        except ValueError:
            continue
        if "event" in l:
            continue
        d = l.get("device_state") or {}
        if d.get("sm_clock_mhz_mean") is not None:
            nvml.append(d["sm_clock_mhz_mean"])
        sampled += l.get("sm_activity") is not None
    med = lambda v: f"{statistics.median(v):.0f}" if v else "-"
    low = f"{min(clocks):.0f}" if clocks else "-"
    print(f"| counters {kv['mode']}, repeat {kv['repeat']} | {kv.get('median_ms', '-')} | {med(clocks)} | "
          f"{low} | {', '.join(sorted(app))} | {', '.join(sorted(reasons))} | {med(nvml)} | "
          f"sm_activity on {sampled} lines |")
EOF
