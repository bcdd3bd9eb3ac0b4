#!/usr/bin/env bash
# Builds the example trainer, runs it with steptrace, prints the summary and where the lines are.
#   scripts/demo.sh [example args...]      e.g. --steps 100 --slow-loader-ms 5 --cpu
#   STEPTRACE_LOG=path scripts/demo.sh     write the JSON lines there (default ./steptrace-demo.jsonl)
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  cat <<'EOF_HELP'
scripts/demo.sh - builds the example trainer (examples/mlp_train), trains it with steptrace and shows
the summary, three fields of the last step's JSON line, and the command that makes the report.
usage: scripts/demo.sh [example options]
  example options     passed to mlp_train (see: build/examples/mlp_train --help), e.g.
                      --steps 100  --slow-loader-ms 5  --cpu
  -h, --help          this text
environment:
  STEPTRACE_LOG=PATH  where the JSON lines go (default ./steptrace-demo.jsonl, replaced each run)
  STEPTRACE_TRACE_DIR=DIR  where trace files of captured steps go (default build/demo-traces)
  STEPTRACE_*         any steptrace setting (docs/configuration.md)
EOF_HELP
  exit 0
fi
source "$(dirname "$0")/common.sh"
install_dependencies
echo "steptrace: configuring and building examples/mlp_train (a first build takes a few minutes on 2 cores)"
# Only the example is built; the tests stay configured (a later `ctest` in the build runs current binaries).
BUILD_TARGETS=steptrace_example_mlp configure_and_build ci
echo "steptrace: training"
if [[ -z "${STEPTRACE_LOG:-}" ]]; then
  export STEPTRACE_LOG="$PWD/steptrace-demo.jsonl"
  rm -f "$STEPTRACE_LOG"
fi
# Traces of the steps that matter go beside the build, not into the current directory.
if [[ -z "${STEPTRACE_TRACE_DIR:-}" ]]; then
  export STEPTRACE_TRACE_DIR="$BUILD_DIR/demo-traces"
  mkdir -p "$STEPTRACE_TRACE_DIR"
fi
# Line-buffered, so that the example's prints and steptrace's summary keep their order when redirected.
stdbuf -oL -eL "$BUILD_DIR/examples/mlp_train" --steps 50 "$@"
echo
log0=${STEPTRACE_LOG//\{rank\}/0}
# This run's traces only (their names carry the first 8 characters of its run_id).
run_id=$(tail -n 1 "$log0" | grep -o '"run_id":"[^"]*"' | cut -d'"' -f4)
trace_dir=${STEPTRACE_TRACE_DIR//\{rank\}/0}
traces=$(find "$trace_dir" -maxdepth 1 -name "trace-${run_id:0:8}-*.json" 2>/dev/null | wc -l)
# Three fields of the last step's line (the whole line: `tail -n 2 LOG | head -n 1`; docs/schema.md).
python3 - "$log0" "$(cd "$(dirname "$0")/../python" && pwd)" <<'EOF_FIELDS'
import sys
sys.path.insert(0, sys.argv[2])
from steptrace.lines import step_lines  # a compact line (the default) with its run record's facts
lines = step_lines(sys.argv[1], strict=False)
if not lines:
    sys.exit("steptrace: no step line in " + sys.argv[1])
l = lines[-1]
d = l.get("diagnosis") or {}
print(f"{len(lines)} step lines in {sys.argv[1]}; the last step ({l['global_step']}):")
print(f"  step_time_ms       {l['step_time_ms']:.3f}")
tps = l.get("tokens_per_second")
print(f"  tokens_per_second  {tps:.0f}" if tps is not None else "  tokens_per_second  null")
print(f"  diagnosis          {d.get('label')} (basis {d.get('basis')})" + (f": {d['reason']}" if d.get("reason") else ""))
gpu = (l.get("null_reasons") or {}).get("device")
if gpu:
    print(f"  no GPU measured:   {gpu}")
EOF_FIELDS
echo "Traces of the steps that matter (open in ui.perfetto.dev): $traces file(s) of this run in $trace_dir"
echo "Next, the report of this run (one HTML page, open it in a browser):"
echo "  python3 scripts/steptrace_report.py $log0 -o steptrace-demo.html"
