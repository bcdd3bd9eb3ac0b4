#!/usr/bin/env bash
# A phase scope's cost before and after a change to the runtime, side by side on one machine.
#   benchmarks/scope_ab.sh OUT_DIR BEFORE [ROUNDS]
# BEFORE: a git revision (its include/ is taken with `git archive`) or a .tgz of an include/ folder
# (for a copy of the tree without .git). Both builds use this tree's benchmarks/scope_cost.cpp, the
# bench preset (Release) and target scope_cost only. ROUNDS (default 9) rounds, the order alternating;
# each build runs twice a round: on two CPUs (taskset -c 2,3: the background thread beside the
# scopes) and on one (taskset -c 4: it shares the core); 0,1 and 1 on a machine of fewer than 5 CPUs. Writes OUT_DIR/{before,after}{,_1core}.jsonl
# and machine.txt; benchmarks/scope_ab_summary.py OUT_DIR prints the table. Where valgrind is
# installed, also the instructions one scope executes (open + close, everything they call) in each
# build, which no neighbour or clock rate moves: callgrind counting only inside PhaseScope's
# functions, over 20 + 20 and 20 + 40 steps of 1000 scopes (`scope_cost --steps K`); the difference
# over 20 000 scopes is the steady state (OUT_DIR/instructions.txt).
source "$(dirname "$0")/../scripts/common.sh"
out=${1:?out dir}; before=${2:?git revision or include .tgz}; rounds=${3:-9}
mkdir -p "$out"; out=$(cd "$out" && pwd)
install_dependencies
{ nproc; lscpu; uname -r; cat /proc/sys/kernel/perf_event_paranoid; } >"$out/machine.txt" 2>&1

tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
(cd "$ROOT" && tar --exclude='./build*' --exclude=./.git -cf - .) | tar -C "$tree" -xf -
rm -rf "$tree/include"
if [[ -f $before ]]; then
  tar -C "$tree" -xzf "$before"
else
  (cd "$ROOT" && git archive "$before" include) | tar -C "$tree" -xf -
fi
[[ -d $tree/include/steptrace ]] || { echo "scope_ab: no include/steptrace in $before" >&2; exit 1; }
build() {
  (cd "$1" && cmake --preset bench "${PREFIX_ARGS[@]}" >/dev/null && cmake --build build-bench -j"$(nproc)" --target scope_cost) \
    >"$out/build_$2.log" 2>&1 || { echo "scope_ab: the $2 build failed (see $out/build_$2.log)" >&2; exit 1; }
}
build "$tree" before & b1=$!
build "$ROOT" after & b2=$!
wait $b1 && wait $b2 || exit 1

two_cpus=2,3 one_cpu=4
(($(nproc) < 5)) && two_cpus=0,1 one_cpu=1
for r in $(seq 1 "$rounds"); do
  order=(before after); ((r % 2 == 0)) && order=(after before)
  for w in "${order[@]}"; do
    bin=$ROOT/build-bench/benchmarks/scope_cost
    [[ $w == before ]] && bin=$tree/build-bench/benchmarks/scope_cost
    taskset -c "$two_cpus" "$bin" 2000000 2>/dev/null >>"$out/$w.jsonl"
    taskset -c "$one_cpu" "$bin" 2000000 2>/dev/null >>"$out/${w}_1core.jsonl"
  done
done

count_instructions() {  # BINARY -> instructions per scope, steady state
  local k total=()
  for k in 20 40; do
    valgrind --tool=callgrind --collect-atstart=no '--toggle-collect=*PhaseScope*' \
      --callgrind-out-file="$out/callgrind.$k" "$1" --steps $k >/dev/null 2>&1 || return 1
    total+=("$(awk '/^totals:/ {print $2}' "$out/callgrind.$k")")
    rm -f "$out/callgrind.$k"
  done
  echo $(((total[1] - total[0]) / 20000))
}
if command -v valgrind >/dev/null; then
  for w in before after; do
    bin=$ROOT/build-bench/benchmarks/scope_cost
    [[ $w == before ]] && bin=$tree/build-bench/benchmarks/scope_cost
    echo "$w: $(count_instructions "$bin" || echo failed) instructions per scope (open + close)"
  done >"$out/instructions.txt"
else
  echo "valgrind not installed: no instruction counts" >"$out/instructions.txt"
fi
python3 "$ROOT/benchmarks/scope_ab_summary.py" "$out"
