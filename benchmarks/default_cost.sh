#!/usr/bin/env bash
# The default held to account (issue #31): what steptrace's defaults cost three kinds of training step,
# side by side with the same program without steptrace and with CUPTI alone, in one device call.
#   benchmarks/default_cost.sh OUT_DIR [REPEATS=5]
# Workloads: transformer (a: GPU-bound, cuBLAS GEMMs, step_workloads --workload transformer), python_gpt
# (b: PyTorch eager GPT through the Python package, host-bound, benchmarks/python_gpt.py), launch (c:
# launch-bound C++ step, step_workloads --workload launch). Modes:
#   off              a: c: step_workloads_baseline (no steptrace compiled in); b: steptrace not imported
#   floor            raw CUPTI: the record kinds steptrace enables + empty callbacks on its launch sites,
#                    records discarded (a: c: STEPTRACE_ENABLED=0 BENCH_RAW_CUPTI=records+callbacks;
#                    b: CUDA_INJECTION64_PATH=libraw_cupti_inject.so, steptrace not imported)
#   default          steptrace with no STEPTRACE_* variable at all but the log path (and
#                    STEPTRACE_LINE_DETAIL=full, for every mode with lines: the summary reads the full line)
#   full             STEPTRACE_TRACE_EVERY=1
#   full_nocounters  STEPTRACE_TRACE_EVERY=1 STEPTRACE_COUNTERS=off
#   default_nocounters  STEPTRACE_COUNTERS=off (not in MODES unless asked: what the counters add to the default)
# and, to take the default's cost apart (asked for in MODES; a: c: only):
#   disabled         the instrumented binary with STEPTRACE_ENABLED=0 (a: c: what linking steptrace costs)
#   host             STEPTRACE_CUPTI=off: scopes, samplers, NVML, lines, no CUPTI
#   callbacks        raw CUPTI callbacks on the launch sites, no records (STEPTRACE_ENABLED=0
#                    BENCH_RAW_CUPTI=callbacks): what staying attached costs an untraced step
#   attached         steptrace with CUPTI attached and never tracing after its first step
#                    (STEPTRACE_TRACE_EVERY=1000000 STEPTRACE_COUNTERS=off)
#   default_detach   STEPTRACE_UNTRACED_CUPTI=detach
# and, to find where a host-bound default's cost goes that its estimate does not hold (a: c: only):
#   host_slowpoll    host, with device memory and NVML read once a minute (STEPTRACE_MEMORY_SAMPLE_MS=60000)
#   host_logevery    host, one line per 100 steps (STEPTRACE_LOG_EVERY=100): what assembling and writing
#                    a line per step costs
#   default_slowpoll default, memory and NVML read once a minute
#   default_norecorder  default without the flight recorder's ring (STEPTRACE_TRACE_KEEP_STEPS=0)
# Every repeat runs each (workload, mode) pair once, in an order shuffled per repeat (seeded: SEED), so
# drift lands on all modes alike. Writes OUT_DIR/runs.csv (one row per run; a failed run leaves a row
# with its status and no times), OUT_DIR/lines/ (each steptrace run's JSONL lines, and any trace files
# the runs wrote), lines.tar.gz (the .jsonl files), setup.txt, failures.txt, log.txt, and the tables of
# benchmarks/default_cost_summary.py in OUT_DIR/table.md.
#
# Builds build-bench (preset bench; step_workloads, step_workloads_baseline, raw_cupti_inject, all cores)
# and, at the same time, the Python package into a venv as tests/checks/python_check.sh does (pip install
# --no-build-isolation; CMake alone where pip cannot build). PYTHON: the interpreter with torch
# (default python3). SKIP_BUILD=1 uses what is there (BIN_DIR, default build-bench/benchmarks; PYTHON
# must import steptrace itself).
# Sizes (environment; the defaults keep a whole run, build included, near 9 minutes on an H100 by the
# estimate printed first; the pace after each repeat says how it goes):
#   TF_LAYERS=16 TF_WARMUP=30 TF_STEPS=40          (a) 514 launches (32 per layer + 2), ~46 ms per step
#   GPT_LAYERS=6 GPT_WARMUP=50 GPT_STEPS=300       (b) ~460 launches, ~19 ms (estimated: python_gpt.py);
#                                                  8 layers make ~600 but ~1 min more than fits
#   LAUNCH_KERNELS=2000 LAUNCH_WARMUP=30 LAUNCH_STEPS=170   (c) 2 001 launches, ~10 ms
#   PIN_CPUS=4-7 runs every program under `taskset -c 4-7` (all modes alike): the host-bound steps' spread
#   between processes comes largely from where the scheduler puts them; empty (the default): no pinning.
#   ALTERNATE_ROUNDS=R instead runs, per workload, one process of R rounds in which each of off, default,
#   full and full_nocounters runs a block of warmup + steps steps (steptrace started and stopped around
#   it; order shuffled per round), and pairs each block with its round's off block
#   (benchmarks/alternate_summary.py -> OUT_DIR/alternate.md): between-process spread (+-8 % for the
#   Python loop) no longer enters the comparison. ALTERNATE_TIMEOUT_S=240 per workload. No floor there
#   (CUPTI injection is per process): take it from a normal run.
#   WORKLOADS, MODES narrow the sets; RUN_TIMEOUT_S=150 ends a run that hangs; DEADLINE_S=570: no repeat
#   begins that the longest repeat so far says would end past it (then fewer repeats, said loudly): the
#   device tool ends a command at 600 s, and what ran is summarized either way.
source "$(dirname "$0")/../scripts/common.sh"
set +e  # a run that fails leaves an empty row; the rest go on

out=${1:?usage: benchmarks/default_cost.sh OUT_DIR [REPEATS]}
repeats=${2:-5}
[[ $repeats =~ ^[1-9][0-9]*$ ]] || { echo "default_cost: REPEATS must be a positive integer" >&2; exit 2; }
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
if [[ -e $out/runs.csv ]]; then
  echo "default_cost: $out/runs.csv exists; give a new or empty OUT_DIR" >&2
  exit 2
fi
mkdir -p "$out/lines"
exec > >(tee -a "$out/log.txt") 2>&1

TF_LAYERS=${TF_LAYERS:-16} TF_WARMUP=${TF_WARMUP:-30} TF_STEPS=${TF_STEPS:-40}
GPT_LAYERS=${GPT_LAYERS:-6} GPT_WARMUP=${GPT_WARMUP:-50} GPT_STEPS=${GPT_STEPS:-300}
LAUNCH_KERNELS=${LAUNCH_KERNELS:-2000} LAUNCH_WARMUP=${LAUNCH_WARMUP:-30} LAUNCH_STEPS=${LAUNCH_STEPS:-170}
WORKLOADS=${WORKLOADS:-transformer python_gpt launch}
MODES=${MODES:-off floor default full full_nocounters}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-150} DEADLINE_S=${DEADLINE_S:-570} SEED=${SEED:-31} ALTERNATE_TIMEOUT_S=${ALTERNATE_TIMEOUT_S:-240}
PYTHON=${PYTHON:-python3}
PIN_CPUS=${PIN_CPUS:-}
pin=()
if [[ -n $PIN_CPUS ]]; then
  if taskset -c "$PIN_CPUS" true 2>/dev/null; then pin=(taskset -c "$PIN_CPUS")
  else echo "default_cost: PIN_CPUS=$PIN_CPUS cannot be used here (taskset failed); runs are not pinned" >&2; PIN_CPUS=; fi
fi
BIN_DIR=${BIN_DIR:-$ROOT/build-bench/benchmarks}
INJECT_LIB=$BIN_DIR/libraw_cupti_inject.so

# Nothing from the caller's environment may change a mode: default means no STEPTRACE_* at all.
for v in $(compgen -e); do
  case $v in
    STEPTRACE_*|BENCH_RAW_*|CUDA_INJECTION64_PATH) echo "default_cost: unsetting $v from the environment"; unset "$v" ;;
  esac
done

say() { printf '[%4ds] %s\n' "$SECONDS" "$*"; }

# ---- what it will take ------------------------------------------------------------------------
# Rough seconds per run on an H100, to plan and print, refined by the first repeat. Guesses from
# earlier H100 runs: transformer 69 ms per step at 24 layers (results/2026-11-24-h100-budget), i.e.
# ~2.9 ms per layer; the launch step ~5 us per launch (results/2026-11-24-h100-traces: 10 001 launches
# 65-69 ms traced); the Python GPT ~13 ms for 4 layers with steptrace (results/2026-11-24-python,
# record_enqueue_ms), i.e. ~1.5 + 2.9 ms per layer; process start, CUDA and torch import as guessed.
# Full attribution slows host-bound steps by ~30-45 % (benchmarks/README.md, (b) and (c) tables).
est_run_ms() {  # WORKLOAD MODE -> milliseconds for one run
  local slow=100
  [[ $2 == full* && $1 != transformer ]] && slow=140
  case $1 in
    transformer) echo $(( 1500 + (TF_WARMUP + TF_STEPS) * TF_LAYERS * 29 / 10 )) ;;
    launch) echo $(( 800 + (LAUNCH_WARMUP + LAUNCH_STEPS) * LAUNCH_KERNELS * 5 * slow / 100000 )) ;;
    python_gpt) echo $(( 3500 + (GPT_WARMUP + GPT_STEPS) * (15 + 29 * GPT_LAYERS) * slow / 1000 )) ;;
  esac
}
per_repeat_ms=0
for w in $WORKLOADS; do for m in $MODES; do per_repeat_ms=$(( per_repeat_ms + $(est_run_ms "$w" "$m") )); done; done
build_s=$([[ ${SKIP_BUILD:-0} == 1 ]] && echo 0 || echo 75)
say "plan: $repeats repeats x {$WORKLOADS} x {$MODES}; estimated ${build_s} s build + $(( repeats * per_repeat_ms / 1000 )) s of runs" \
    "= ~$(( (build_s + repeats * per_repeat_ms / 1000 + 30) / 60 )) min on an H100 (deadline for starting a repeat: ${DEADLINE_S} s)"
for w in $WORKLOADS; do say "  $w: ~$(( $(est_run_ms "$w" off) / 1000 )) s per run (off)"; done

# ---- build ------------------------------------------------------------------------------------
venv=$ROOT/build-bench/default-cost-venv
py_run=$PYTHON
py_path=
build_python() {  # the package as a user installs it (tests/checks/python_check.sh's way); output to build.log
  local pkg=$ROOT/build-bench/default-cost-python
  if [[ -d $ROOT/.deps/usr ]]; then
    export CMAKE_PREFIX_PATH=$ROOT/.deps/usr${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}
    export STEPTRACE_CMAKE_ARGS="-DCMAKE_PREFIX_PATH=$CMAKE_PREFIX_PATH ${STEPTRACE_CMAKE_ARGS:-}"
  fi
  rm -rf "$venv" "$pkg" "$ROOT/python/build" "$ROOT/python/steptrace.egg-info"
  # The interpreter's own packages stay visible (torch, setuptools, pybind11), also for a venv made
  # from a venv, whose parent's site-packages go in through a .pth file (as python_check.sh does).
  if "$PYTHON" -m venv --system-site-packages "$venv" &&
     "$PYTHON" -c 'import site; print("\n".join(site.getsitepackages()))' \
       >"$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/_parent.pth" &&
     "$venv/bin/python" -m pip install --no-build-isolation --no-index --no-deps -q "$ROOT/python"; then
    echo "python: installed with pip into $venv"
  else
    echo "python: pip could not build here; building python/ with CMake alone"
    cmake -S "$ROOT/python" -B "$ROOT/build-bench/default-cost-python-cmake" -DPython_EXECUTABLE="$(command -v "$PYTHON")" \
      -DCMAKE_BUILD_TYPE=Release ${CMAKE_PREFIX_PATH:+-DCMAKE_PREFIX_PATH="$CMAKE_PREFIX_PATH"} &&
      cmake --build "$ROOT/build-bench/default-cost-python-cmake" --target _steptrace -j"$(nproc)" &&
      mkdir -p "$pkg/steptrace" && cp "$ROOT"/python/steptrace/*.py "$pkg/steptrace/" &&
      cp "$ROOT"/build-bench/default-cost-python-cmake/_steptrace*.so "$pkg/steptrace/"
  fi
  rm -rf "$ROOT/python/build" "$ROOT/python/steptrace.egg-info"
}
PREFIX_ARGS=()
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  install_dependencies || say "warning: install_dependencies failed; building with what is there"
  say "build: build-bench (bench preset) and the Python package, at the same time, $(nproc) cores (log: build.log)"
  build_python >"$out/build_python.log" 2>&1 &
  py_pid=$!
  command -v ninja >/dev/null && export CMAKE_GENERATOR=Ninja
  keep_going=(-k); [[ ${CMAKE_GENERATOR:-} == Ninja ]] && keep_going=(-k 0)  # build what can be built
  { (cd "$ROOT" && cmake --preset bench -B "$ROOT/build-bench" "${PREFIX_ARGS[@]}") &&
      cmake --build "$ROOT/build-bench" -j"$(nproc)" --target step_workloads step_workloads_baseline raw_cupti_inject \
        -- "${keep_going[@]}"; } >"$out/build.log" 2>&1 || { say "build: FAILED (the runs that need it will fail):"; tail -20 "$out/build.log"; }
  wait "$py_pid"
  cat "$out/build_python.log" >>"$out/build.log"; rm -f "$out/build_python.log"
  if "$venv/bin/python" -c 'import steptrace' 2>/dev/null; then
    py_run=$venv/bin/python
  elif [[ -d $ROOT/build-bench/default-cost-python/steptrace ]]; then
    py_path=$ROOT/build-bench/default-cost-python
  else
    say "build: the Python package did not build (python_gpt's steptrace modes will fail):"; tail -20 "$out/build.log"
  fi
  say "build: done"
elif [[ -d $ROOT/.deps/usr ]]; then
  export LD_LIBRARY_PATH="$ROOT/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
for f in step_workloads step_workloads_baseline libraw_cupti_inject.so; do
  [[ -e $BIN_DIR/$f ]] || say "warning: $BIN_DIR/$f missing"
done
py_env=()  # where the package was built with CMake alone, it is found through PYTHONPATH
[[ -n $py_path ]] && py_env=(PYTHONPATH="$py_path${PYTHONPATH:+:$PYTHONPATH}")
torch_version=$(env "${py_env[@]}" "$py_run" -c 'import torch; print(torch.__version__, "cuda", torch.cuda.is_available())' 2>/dev/null)
[[ -n $torch_version ]] || say "warning: $py_run cannot import torch: python_gpt will fail"

{
  echo "device=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  echo "cpus=$(nproc)"
  echo "date=$(date -u +%FT%TZ)"
  echo "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo '+local changes')"
  echo "repeats=$repeats"
  echo "pinned_cpus=${PIN_CPUS:-none}"
  echo "seed=$SEED"
  echo "python=$py_run (torch $torch_version)"
  echo "transformer=--workload transformer --layers $TF_LAYERS warmup $TF_WARMUP steps $TF_STEPS"
  echo "python_gpt=--layers $GPT_LAYERS warmup $GPT_WARMUP steps $GPT_STEPS"
  echo "launch=--workload launch --kernels $LAUNCH_KERNELS warmup $LAUNCH_WARMUP steps $LAUNCH_STEPS"
} >"$out/setup.txt"

# ---- one run ----------------------------------------------------------------------------------
csv=$out/runs.csv
echo "repeat,slot,workload,mode,status,mean_ms,median_ms,p10_ms,p90_ms,steps,warmup,launches_per_step,floor_records,run_s,lines" >"$csv"

run_one() {  # WORKLOAD MODE REPEAT SLOT
  local w=$1 m=$2 r=$3 slot=$4
  local env=() cmd=() warmup lines=
  case $m in
    off|floor) ;;
    default) lines=lines/${w}_${m}_r$r.jsonl ;;
    full) lines=lines/${w}_${m}_r$r.jsonl env+=(STEPTRACE_TRACE_EVERY=1) ;;
    full_nocounters) lines=lines/${w}_${m}_r$r.jsonl env+=(STEPTRACE_TRACE_EVERY=1 STEPTRACE_COUNTERS=off) ;;
    default_nocounters) lines=lines/${w}_${m}_r$r.jsonl env+=(STEPTRACE_COUNTERS=off) ;;
    host) lines=lines/${w}_${m}_r$r.jsonl env+=(STEPTRACE_CUPTI=off) ;;
    callbacks|disabled) ;;
    attached) lines=lines/${w}_${m}_r$r.jsonl env+=(STEPTRACE_TRACE_EVERY=1000000 STEPTRACE_COUNTERS=off) ;;
    default_detach) lines=lines/${w}_${m}_r$r.jsonl env+=(STEPTRACE_UNTRACED_CUPTI=detach) ;;
    host_slowpoll) lines=lines/${w}_${m}_r$r.jsonl env+=(STEPTRACE_CUPTI=off STEPTRACE_MEMORY_SAMPLE_MS=60000) ;;
    host_logevery) lines=lines/${w}_${m}_r$r.jsonl env+=(STEPTRACE_CUPTI=off STEPTRACE_LOG_EVERY=100) ;;
    default_slowpoll) lines=lines/${w}_${m}_r$r.jsonl env+=(STEPTRACE_MEMORY_SAMPLE_MS=60000) ;;
    default_norecorder) lines=lines/${w}_${m}_r$r.jsonl env+=(STEPTRACE_TRACE_KEEP_STEPS=0) ;;
    *) say "unknown mode $m"; return ;;
  esac
  [[ -n $lines ]] && rm -f "$out/$lines"
  case $w in
    transformer|launch)
      local exe=$BIN_DIR/step_workloads
      [[ $m == off ]] && exe=$BIN_DIR/step_workloads_baseline
      [[ $m == floor ]] && env+=(STEPTRACE_ENABLED=0 BENCH_RAW_CUPTI=records+callbacks)
      [[ $m == callbacks ]] && env+=(STEPTRACE_ENABLED=0 BENCH_RAW_CUPTI=callbacks)
      [[ $m == disabled ]] && env+=(STEPTRACE_ENABLED=0)
      # The full line: the summary reads its accounting (overhead.parts); what the compact line (the
      # default) adds on the background thread is benchmarks/line_bytes's measure.
      [[ -n $lines ]] && env+=(STEPTRACE_LOG="$out/$lines" STEPTRACE_LINE_DETAIL=full)
      if [[ $w == transformer ]]; then
        warmup=$TF_WARMUP cmd=("$exe" --workload transformer --layers "$TF_LAYERS" --steps "$TF_STEPS" --warmup "$TF_WARMUP")
      else
        warmup=$LAUNCH_WARMUP cmd=("$exe" --workload launch --kernels "$LAUNCH_KERNELS" --steps "$LAUNCH_STEPS" --warmup "$LAUNCH_WARMUP")
      fi ;;
    python_gpt)
      env+=("${py_env[@]}")
      warmup=$GPT_WARMUP
      cmd=("$py_run" "$ROOT/benchmarks/python_gpt.py" --mode "$m" --layers "$GPT_LAYERS" --steps "$GPT_STEPS"
           --warmup "$GPT_WARMUP" --inject "$INJECT_LIB")
      [[ -n $lines ]] && cmd+=(--lines "$out/$lines") ;;
    *) say "unknown workload $w"; return ;;
  esac
  local start_ns stdout rc err
  start_ns=$(date +%s%N)
  err=$(mktemp)
  stdout=$(cd "$out" && env "${env[@]}" timeout -k 10 "$RUN_TIMEOUT_S" "${pin[@]}" "${cmd[@]}" 2>"$err")
  rc=$?
  local run_s=$(( ($(date +%s%N) - start_ns) / 1000000 ))
  run_s=$(printf '%d.%03d' $(( run_s / 1000 )) $(( run_s % 1000 )))
  local line
  line=$(grep '^result ' <<<"$stdout" | tail -1)
  # A run that printed its result and then failed to exit cleanly (a crash or hang at teardown) still
  # measured its steps: kept, with the exit in its status (ok_rcN, ok_timeout) and in failures.txt.
  local status=ok
  if (( rc == 124 || rc == 137 )); then status=timeout
  elif (( rc != 0 )); then status=failed_rc$rc
  fi
  if [[ -n $line ]]; then
    [[ $status == ok ]] || { status=ok_${status#failed_}; echo "== r$r $w/$m: result printed, then $status" >>"$out/failures.txt"; }
  elif [[ $status == ok ]]; then status=failed_noresult
  fi
  kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $line" | head -1; }
  if [[ $status == ok* ]]; then
    echo "$r,$slot,$w,$m,$status,$(kv mean_ms),$(kv median_ms),$(kv p10_ms),$(kv p90_ms),$(kv steps),$warmup,$(kv launches_per_step),$(kv floor_records),$run_s,$lines" >>"$csv"
    say "r$r $slot $w/$m: mean $(kv mean_ms) ms, median $(kv median_ms) ms, $(kv launches_per_step) launches/step (${run_s} s)${status#ok}"
  else
    echo "$r,$slot,$w,$m,$status,,,,,,$warmup,,,$run_s,$lines" >>"$csv"
    say "r$r $slot $w/$m: $status after ${run_s} s; its stderr's end is in failures.txt"
    { echo "== r$r $w/$m: $status: ${env[*]} ${cmd[*]}"; tail -25 "$err"; grep -v '^result ' <<<"$stdout" | tail -5; } >>"$out/failures.txt"
  fi
  rm -f "$err"
}

# ---- the repeats, interleaved -----------------------------------------------------------------
pairs=()
for w in $WORKLOADS; do for m in $MODES; do pairs+=("$w:$m"); done; done
shuffle() {  # SEED ITEMS... -> ORDER (Fisher-Yates on bash's seeded RANDOM: the same seed, the same order)
  RANDOM=$1; shift
  ORDER=("$@")
  local i j t
  for (( i = ${#ORDER[@]} - 1; i > 0; i-- )); do
    j=$(( RANDOM % (i + 1) )); t=${ORDER[i]}; ORDER[i]=${ORDER[j]}; ORDER[j]=$t
  done
}
# Untimed: the first process after a build pays for loading the driver and reading torch from disk;
# without this, whichever run came first in repeat 1 would carry it.
say "warm-up (untimed): one short run of each program"
(cd "$out" && timeout -k 10 "$RUN_TIMEOUT_S" "$BIN_DIR/step_workloads_baseline" --workload launch --kernels 100 --steps 3 --warmup 1 >/dev/null 2>&1)
(cd "$out" && env "${py_env[@]}" timeout -k 10 "$RUN_TIMEOUT_S" "$py_run" "$ROOT/benchmarks/python_gpt.py" \
   --mode off --layers 1 --steps 3 --warmup 1 >/dev/null 2>&1)
# ---- or: every mode inside one process per workload (ALTERNATE_ROUNDS) ---------------------------
if [[ -n ${ALTERNATE_ROUNDS:-} ]]; then
  [[ $ALTERNATE_ROUNDS =~ ^[1-9][0-9]*$ ]] || { say "ALTERNATE_ROUNDS must be a positive integer"; exit 2; }
  for w in $WORKLOADS; do
    case $w in
      transformer) cmd=("$BIN_DIR/step_workloads" --workload transformer --layers "$TF_LAYERS" --steps "$TF_STEPS"
                        --warmup "$TF_WARMUP") ;;
      launch) cmd=("$BIN_DIR/step_workloads" --workload launch --kernels "$LAUNCH_KERNELS" --steps "$LAUNCH_STEPS"
                   --warmup "$LAUNCH_WARMUP") ;;
      python_gpt) cmd=(env "${py_env[@]}" "$py_run" "$ROOT/benchmarks/python_gpt.py" --mode alternate --layers "$GPT_LAYERS"
                       --steps "$GPT_STEPS" --warmup "$GPT_WARMUP") ;;
      *) say "unknown workload $w"; continue ;;
    esac
    [[ $w == python_gpt ]] && cmd+=(--rounds "$ALTERNATE_ROUNDS" --lines-dir lines) || cmd+=(--alternate "$ALTERNATE_ROUNDS" --lines-dir lines)
    say "alternate: $w, $ALTERNATE_ROUNDS rounds of off/default/full/full_nocounters in one process"
    t0=$SECONDS
    (cd "$out" && timeout -k 10 "$ALTERNATE_TIMEOUT_S" "${pin[@]}" "${cmd[@]}" >"$out/alternate_$w.txt" 2>"$out/alternate_$w.err")
    say "alternate: $w exit $? after $(( SECONDS - t0 )) s, $(grep -c '^block ' "$out/alternate_$w.txt") blocks"
  done
  (cd "$out" && find lines -name '*.jsonl' -print0 | tar --null -czf lines.tar.gz -T -) || say "warning: lines.tar.gz not written"
  python3 "$ROOT/benchmarks/alternate_summary.py" --lines-root "$out" "$out"/alternate_*.txt >"$out/alternate.md" || say "summary failed"
  cat "$out/alternate.md"
  exit 0
fi

done_repeats=0 longest_repeat_s=0
for (( r = 1; r <= repeats; r++ )); do
  if (( r > 1 && SECONDS + longest_repeat_s > DEADLINE_S )); then
    say "STOPPING after $done_repeats repeats: another would end near $(( SECONDS + longest_repeat_s )) s, past DEADLINE_S=$DEADLINE_S"
    break
  fi
  shuffle $(( SEED * 1000 + r )) "${pairs[@]}"
  say "repeat $r/$repeats: ${ORDER[*]}"
  t_repeat=$SECONDS
  slot=0
  for p in "${ORDER[@]}"; do
    slot=$(( slot + 1 ))
    run_one "${p%%:*}" "${p#*:}" "$r" "$slot/${#ORDER[@]}"
  done
  took=$(( SECONDS - t_repeat ))
  (( took > longest_repeat_s )) && longest_repeat_s=$took
  done_repeats=$r
  say "repeat $r took $took s; the rest at that pace: ~$(( (repeats - r) * took )) s, done near $(( SECONDS + (repeats - r) * took )) s"
done

(cd "$out" && find lines -name '*.jsonl' -print0 | tar --null -czf lines.tar.gz -T -) || say "warning: lines.tar.gz not written"
say "runs: $(grep -c ',ok[_a-z0-9]*,' "$csv") ok, $(tail -n +2 "$csv" | grep -vc ',ok[_a-z0-9]*,') not; $done_repeats repeats"
python3 "$ROOT/benchmarks/default_cost_summary.py" "$out" || say "summary failed"
say "finished: $out (table.md, runs.csv, lines.tar.gz, setup.txt, log.txt)"
