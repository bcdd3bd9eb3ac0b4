#!/usr/bin/env bash
# Builds steptrace and runs its tests.
#   scripts/test.sh                 every test that needs no GPU, then the fast tests of files, signals,
#                                   fork, threads and limits (label sanitize) built with AddressSanitizer
#                                   and UndefinedBehaviorSanitizer (what CI runs)
#   scripts/test.sh --asan          every CPU test built with AddressSanitizer + UBSan (build-asan)
#   scripts/test.sh --tsan          every CPU test built with ThreadSanitizer (build-tsan)
#   --fast (with --asan/--tsan)     only the tests labelled sanitize
#   scripts/test.sh --gpu           the tests labelled gpu (on a machine with a GPU)
#   scripts/test.sh --gpu --sanitize  the same, then the GPU example under compute-sanitizer
source "$(dirname "$0")/common.sh"
labels=(-LE gpu)
preset=ci
sanitize=0
host_sanitizer=""
fast=0
for arg in "$@"; do
  case "$arg" in
    --gpu) labels=(-L gpu); preset=gpu ;;
    --sanitize) sanitize=1 ;;
    --asan) host_sanitizer=asan ;;
    --tsan) host_sanitizer=tsan ;;
    --fast) fast=1 ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: scripts/test.sh [--gpu [--sanitize]] | [--asan|--tsan [--fast]] (--help: what each does)" >&2; exit 2 ;;
  esac
done

# The sanitizers' settings: any report fails the test; steptrace's statics are never destroyed on
# purpose (reachable, so not leaks).
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:halt_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

# run_sanitized PRESET: configure, build and run (all CPU tests, or those labelled sanitize).
run_sanitized() {
  local only=(-LE gpu) targets=""
  if ((fast)); then only=(-L sanitize); targets=sanitize_tests; fi
  echo "steptrace: configuring the $1 build"
  configure_only "$1"
  echo "steptrace: building ${targets:-every CPU test} with the $1 preset in $BUILD_DIR"
  cmake --build "$BUILD_DIR" -j"$(nproc)" ${targets:+--target $targets}
  echo "steptrace: running ${targets:+the tests labelled sanitize }under $1"
  ctest --test-dir "$BUILD_DIR" "${only[@]}" --output-on-failure -j"$(nproc)"
}

install_dependencies
if [[ -n $host_sanitizer ]]; then
  run_sanitized "$host_sanitizer"
  exit
fi
find_nccl
echo "steptrace: configuring and building the $preset preset"
configure_and_build "$preset" "${NCCL_ARGS[@]}"
echo "steptrace: running the tests (${labels[*]})"
ctest --test-dir "$BUILD_DIR" "${labels[@]}" --output-on-failure -j"$(nproc)"
if [[ $preset == ci ]]; then
  fast=1
  run_sanitized asan
fi
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
