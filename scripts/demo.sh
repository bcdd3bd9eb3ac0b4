#!/usr/bin/env bash
# Builds the example trainer, runs it with steptrace, prints the summary and where the lines are.
#   scripts/demo.sh [example args...]      e.g. --steps 100 --slow-loader-ms 5 --cpu
#   STEPTRACE_LOG=path scripts/demo.sh     write the JSON lines there (default ./steptrace-demo.jsonl)
source "$(dirname "$0")/common.sh"
install_dependencies
configure_and_build ci -DSTEPTRACE_BUILD_TESTS=OFF >/dev/null
if [[ -z "${STEPTRACE_LOG:-}" ]]; then
  export STEPTRACE_LOG="$PWD/steptrace-demo.jsonl"
  rm -f "$STEPTRACE_LOG"
fi
"$BUILD_DIR/examples/mlp_train" --steps 50 "$@"
echo
log0=${STEPTRACE_LOG//\{rank\}/0}
echo "JSON lines: $STEPTRACE_LOG ($(grep -vc '^{"event"' "$log0") step lines). The last step's line:"
grep -v '^{"event"' "$log0" | tail -n 1
echo "and the record that ends the run:"
tail -n 1 "$log0"
