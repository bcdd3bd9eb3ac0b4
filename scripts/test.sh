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
  # Chained: inside a stage (an `if` condition) `set -e` does not stop a failed step.
  echo "steptrace: configuring the $1 build"
  configure_only "$1" || return 1
  echo "steptrace: building ${targets:-every CPU test} with the $1 preset in $BUILD_DIR"
  cmake --build "$BUILD_DIR" -j"$(nproc)" ${targets:+--target $targets} || return 1
  echo "steptrace: running ${targets:+the tests labelled sanitize }under $1"
  ctest --test-dir "$BUILD_DIR" "${only[@]}" --output-on-failure -j"$(nproc)"
}

# Every stage runs, whatever the one before it gave; the last lines say, stage by stage, what passed,
# failed or was skipped and why, and the exit status is non-zero if any failed.
stages=()
failed=0
stage() {  # stage NAME COMMAND...: runs it, records passed or failed
  local name=$1; shift
  if ("$@"); then stages+=("$name: passed"); else stages+=("$name: FAILED (exit $?)"); failed=1; fi
}
skip() { stages+=("$1: skipped ($2)"); }
summary() {
  echo "steptrace: stages"
  for line in "${stages[@]}"; do echo "  $line"; done
  exit "$failed"
}

install_dependencies
if [[ -n $host_sanitizer ]]; then
  stage "$host_sanitizer build and tests" run_sanitized "$host_sanitizer"
  summary
fi
find_nccl
echo "steptrace: configuring and building the $preset preset"
if ! (configure_and_build "$preset" "${NCCL_ARGS[@]}"); then
  stages+=("$preset build: FAILED"); failed=1
  skip "tests (${labels[*]})" "the build failed"
  [[ $preset == ci ]] && skip "AddressSanitizer (label sanitize)" "the build failed"
  summary
fi
stages+=("$preset build: passed")
echo "steptrace: running the tests (${labels[*]})"
stage "tests (${labels[*]})" ctest --test-dir "$BUILD_DIR" "${labels[@]}" --output-on-failure -j"$(nproc)"
if [[ $preset == ci ]]; then
  fast=1
  stage "AddressSanitizer + UBSan (label sanitize)" run_sanitized asan
fi
if ((sanitize)); then
  # Every GPU program under each compute-sanitizer tool. compute-sanitizer is itself a CUPTI client:
  # steptrace must notice, fall back to host timings and say why in the line.
  for tool in memcheck racecheck synccheck; do
    echo "steptrace: compute-sanitizer --tool $tool"
    stage "compute-sanitizer $tool" bash -c "cd '$BUILD_DIR' &&
      compute-sanitizer --tool $tool --error-exitcode 1 examples/mlp_train --steps 5 --log sanitizer_example.jsonl &&
      compute-sanitizer --tool $tool --error-exitcode 1 tests/gpu_workloads sanitizer_workloads.jsonl sanitizer_truth.json"
    echo "steptrace: under $tool the line says: $(grep -o '"gpu_utilization":"[^"]*"' "$BUILD_DIR/sanitizer_workloads.jsonl" 2>/dev/null | head -n 1)"
  done
fi
summary
