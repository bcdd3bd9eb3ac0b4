#!/usr/bin/env bash
# A phase scope's cost before and after a change to the runtime, side by side on one machine.
#   benchmarks/scope_ab.sh OUT_DIR BEFORE [ROUNDS]
# BEFORE: a git revision (its include/ is taken with `git archive`) or a .tgz of an include/ folder
# (for a copy of the tree without .git). Both builds are made fresh in a temporary copy of this tree
# (the bench preset, Release, target scope_cost only), the before one with BEFORE's include/; both use
# this tree's benchmarks/scope_cost.cpp. ROUNDS (default 9) rounds, the order alternating; each build
# runs twice a round: on two CPUs (the background thread beside the scopes) and on one (it shares the
# core), taken from the CPUs this process may use. Writes OUT_DIR/{before,after}{,_1core}.jsonl and
# machine.txt; benchmarks/scope_ab_summary.py OUT_DIR prints the table. Where valgrind is installed,
# also the instructions one scope executes (open + close, everything they call) in each build, which
# no neighbour or clock rate moves: callgrind counting only inside PhaseScope's functions, over 20 + 20
# and 20 + 40 steps of 1000 scopes (`scope_cost --steps K`); the difference over 20 000 scopes is the
# steady state (OUT_DIR/instructions.txt).
source "$(dirname "$0")/../scripts/common.sh"
out=${1:?out dir}; before=${2:?git revision or include .tgz}; rounds=${3:-9}
mkdir -p "$out"; out=$(cd "$out" && pwd)
install_dependencies

# Two CPUs and one, from the CPUs this process may use (a container's cpuset included), away from the
# first two where there are enough.
read -r -a cpus <<<"$(python3 -c 'import os; print(*sorted(os.sched_getaffinity(0)))')"
if ((${#cpus[@]} >= 5)); then two_cpus=${cpus[2]},${cpus[3]} one_cpu=${cpus[4]}
elif ((${#cpus[@]} >= 2)); then two_cpus=${cpus[0]},${cpus[1]} one_cpu=${cpus[1]}
else two_cpus=${cpus[0]} one_cpu=${cpus[0]}; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for w in before after; do
  mkdir -p "$tmp/$w"
  (cd "$ROOT" && tar --exclude='./build*' --exclude=./.git -cf - .) | tar -C "$tmp/$w" -xf -
done
rm -rf "$tmp/before/include"
if [[ -f $before ]]; then
  tar -C "$tmp/before" -xzf "$before"
else
  (cd "$ROOT" && git archive "$before" include) | tar -C "$tmp/before" -xf -
fi
[[ -d $tmp/before/include/steptrace ]] || { echo "scope_ab: no include/steptrace in $before" >&2; exit 1; }
{
  echo "host: $(hostname) $(cat /etc/machine-id 2>/dev/null)"
  echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)"
  # Content hashes, not revisions: a copy of the tree may carry an older .git than its files.
  for w in before after; do
    echo "$w: include/ sha256 $(cd "$tmp/$w" && find include -type f | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16)"
  done
  echo "before from: $before"
  echo "cpus: two $two_cpus, one $one_cpu (of ${cpus[*]})"
  echo "compiler: $(c++ --version | head -n 1)"
  uname -r
  lscpu 2>/dev/null || true
} >"$out/machine.txt"

build() {
  (cd "$tmp/$1" && cmake --preset bench "${PREFIX_ARGS[@]}" >/dev/null && cmake --build build-bench -j"$(nproc)" --target scope_cost) \
    >"$out/build_$1.log" 2>&1 || { echo "scope_ab: the $1 build failed (see $out/build_$1.log)" >&2; return 1; }
}
build before & b1=$!
build after & b2=$!
ok=1
wait $b1 || ok=0
wait $b2 || ok=0
((ok)) || exit 1

run() {  # WHICH CPUS OUTFILE
  # From the temporary folder: a slow step's automatic trace (trace-*.json) lands there.
  (cd "$tmp" && taskset -c "$2" "$tmp/$1/build-bench/benchmarks/scope_cost" 2000000) >>"$3" 2>>"$out/stderr_$1.txt" ||
    { echo "scope_ab: scope_cost ($1, CPUs $2) failed; see $out/stderr_$1.txt" >&2; exit 1; }
}
for r in $(seq 1 "$rounds"); do
  order=(before after); ((r % 2 == 0)) && order=(after before)
  for w in "${order[@]}"; do
    run "$w" "$two_cpus" "$out/$w.jsonl"
    run "$w" "$one_cpu" "$out/${w}_1core.jsonl"
  done
done

count_instructions() {  # WHICH -> instructions per scope, steady state, and the clock the scopes read
  local k total=() clock=""
  for k in 20 40; do
    clock=$(valgrind --tool=callgrind --collect-atstart=no '--toggle-collect=*PhaseScope*' \
      --callgrind-out-file="$out/callgrind.$k" "$tmp/$1/build-bench/benchmarks/scope_cost" --steps $k 2>/dev/null) || return 1
    total+=("$(awk '/^totals:/ {print $2}' "$out/callgrind.$k")")
    rm -f "$out/callgrind.$k"
  done
  echo "$(((total[1] - total[0]) / 20000)) instructions per scope (open + close), scopes reading $(sed -n 's/.*"scope_clock":"\([a-z_]*\)".*/\1/p' <<<"$clock")"
}
if command -v valgrind >/dev/null; then
  for w in before after; do echo "$w: $(count_instructions "$w" || echo failed)"; done >"$out/instructions.txt"
else
  echo "valgrind not installed: no instruction counts" >"$out/instructions.txt"
fi
python3 "$ROOT/benchmarks/scope_ab_summary.py" "$out"
