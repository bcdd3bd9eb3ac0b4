#!/usr/bin/env bash
# Builds the example trainer, runs it with steptrace, prints the summary and where the lines are.
#   scripts/demo.sh [example args...]      e.g. --steps 100 --slow-loader-ms 5 --cpu
#   STEPTRACE_LOG=path scripts/demo.sh     write the JSON lines there (default ./steptrace-demo.jsonl)
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
  cat <<'EOF_HELP'
scripts/demo.sh - builds the example trainer (examples/mlp_train), trains it with steptrace and shows
the summary, the last step's JSON line and the run's end record.
usage: scripts/demo.sh [example options]
  example options     passed to mlp_train (see: build/examples/mlp_train --help), e.g.
                      --steps 100  --slow-loader-ms 5  --cpu
  -h, --help          this text
environment:
  STEPTRACE_LOG=PATH  where the JSON lines go (default ./steptrace-demo.jsonl, replaced each run)
  STEPTRACE_TRACE_DIR=DIR  where trace files of captured steps go (default build/demo-traces)
  STEPTRACE_*         any steptrace setting (README 'Configuration')
EOF_HELP
  exit 0
fi
source "$(dirname "$0")/common.sh"
install_dependencies
echo "steptrace: configuring and building examples/mlp_train (a first build takes a few minutes on 2 cores)"
BUILD_TARGETS=steptrace_example_mlp configure_and_build ci -DSTEPTRACE_BUILD_TESTS=OFF
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
echo "JSON lines: $STEPTRACE_LOG ($(grep -vc '^{"event"' "$log0") step lines). The last step's line:"
grep -v '^{"event"' "$log0" | tail -n 1
echo "and the record that ends the run:"
tail -n 1 "$log0"
# This run's traces only (their names carry the first 8 characters of its run_id).
run_id=$(tail -n 1 "$log0" | grep -o '"run_id":"[^"]*"' | cut -d'"' -f4)
trace_dir=${STEPTRACE_TRACE_DIR//\{rank\}/0}
traces=$(find "$trace_dir" -maxdepth 1 -name "trace-${run_id:0:8}-*.json" 2>/dev/null | wc -l)
echo "Traces of the steps that matter (open in ui.perfetto.dev): $traces file(s) of this run in $trace_dir"
