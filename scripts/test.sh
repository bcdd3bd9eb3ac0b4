#!/usr/bin/env bash
# Builds steptrace and runs its tests.
#   scripts/test.sh                 every test that needs no GPU (what CI runs)
#   scripts/test.sh --gpu           the tests labelled gpu (on a machine with a GPU)
#   scripts/test.sh --gpu --sanitize  the same, then the GPU example under compute-sanitizer
source "$(dirname "$0")/common.sh"
labels=(-LE gpu)
preset=ci
sanitize=0
for arg in "$@"; do
  case "$arg" in
    --gpu) labels=(-L gpu); preset=gpu ;;
    --sanitize) sanitize=1 ;;
    *) echo "usage: scripts/test.sh [--gpu [--sanitize]]" >&2; exit 2 ;;
  esac
done
install_dependencies
find_nccl
configure_and_build "$preset" "${NCCL_ARGS[@]}"
ctest --test-dir "$BUILD_DIR" "${labels[@]}" --output-on-failure -j"$(nproc)"
if ((sanitize)); then
  # Every GPU program under each compute-sanitizer tool. compute-sanitizer is itself a CUPTI client:
  # steptrace must notice, fall back to host timings and say why in the line.
  for tool in memcheck racecheck synccheck; do
    echo "steptrace: compute-sanitizer --tool $tool"
    (cd "$BUILD_DIR" &&
      compute-sanitizer --tool "$tool" --error-exitcode 1 examples/mlp_train --steps 5 --log sanitizer_example.jsonl &&
      compute-sanitizer --tool "$tool" --error-exitcode 1 tests/gpu_workloads sanitizer_workloads.jsonl sanitizer_truth.json)
    echo "steptrace: under $tool the line says: $(grep -o '"gpu_utilization":"[^"]*"' "$BUILD_DIR/sanitizer_workloads.jsonl" | head -n 1)"
  done
fi
