#!/usr/bin/env python3
"""Whether the default budget holds on short framework steps: PyTorch Lightning and the Hugging Face Trainer,
each with steptrace's callback on the defaults (no setting but the log path), trained long enough for the
budget's controller to settle.

    framework_budget.py [--steps 600] [--steady-from 250] [--out DIR] [--frameworks lightning,transformers]
                        [--line-detail full] [--time-calls] [--probe] [--against-off R [--modes M,..]]
                        [--interleave G [--rounds R]]

The models are python/tests/test_callbacks_gpu.py's (Lightning: embedding + MLP over a 1 000-token
vocabulary; transformers: a 2-layer GPT-2 of d_model 128), 4 x 64 tokens a batch, 2 batches accumulated
per optimizer step, an evaluation of 2 batches every 100 steps: steps of a few milliseconds, host-bound,
where a fixed per-step cost weighs most. Each run's lines are the default (compact) ones unless --line-detail
says otherwise.

Prints per framework, over the lines from --steady-from on (the steady state):
  framework=F lines=N steady=M traced=T step_ms_median=.. trace_every_last=.. estimate_mean=..
  estimate_last=.. over_budget=K within_budget_last=true|false|null markers_every_last=..
  untraced_cupti_last=.. method_last=.. traced_step_extra_ms_last=.. clean_step_ms_last=.. parts_last={..}
(over_budget: steady lines whose overhead.within_budget was false; markers_every, untraced_cupti, method,
traced_step_extra_ms, clean_step_ms and parts are on full lines only (--line-detail full), `-` otherwise).
A framework that is not installed prints `framework=F skipped: WHY`.

--probe: what any Python call costs where the callbacks' hooks run: a callback placed before steptrace's
times, at the batch's start of one step in 7, a Python function that does nothing, an extension call that
does nothing (is_running) and a clock pair, one each (as the hooks meet them: once, between the
framework's work; each time includes one clock read, ~0.1 us; the probe runs before steptrace's
callback, so it meets the coldest caches), then the same 2 000 times in a row at the end (warm); with what could slow every
call (a profile or trace function, sys.monitoring tools, the threads, the CPUs the process may use):
  probe framework=F where=hook|loop noop_ns=.. ext_ns=.. clock_ns=.. n=..
  probe framework=F profile=.. trace=.. monitoring=.. threads=[..] cpus=N switchinterval_ms=..

--against-off R [--modes off,default,...]: R rounds per framework of each mode (MODES: off, no callback;
default; host, gpu=off; hostnolog, gpu=off and no log (no line is made); nocupti, cupti=off; nomarkers, stream_markers=false; nocounters, counters=off;
nomem, memory_sample_ms=60000; disabled, enabled=false),
each training in a fresh process (the later trainings of one process run faster than its first), the
order rotated each round, all timed by the same clock (a callback of this script: the time between
optimizer steps' ends, as the framework's loop runs them). Prints per run
  clock framework=F round=R mode=M steps=S median_ms=.. mean_ms=.. estimate_mean=..  (steps from --steady-from)
and per framework and mode its cost against off in the same round, by means and by medians, beside the
mean estimate of its lines: what the lines say steptrace costs, checked against the program's own clock.
With --probe, each run's probe line too (the hooks' Python cost with and without steptrace).

--interleave G [--rounds R] [--modes M,..]: the in-run comparison (benchmarks/interleave.py): R trainings
per framework and mode (--modes' modes but off; default when none), each in its own process; from
optimizer step --steady-from on, G steps with steptrace's callback and G without alternate (the callback
behind a gate: off, none of its step hooks runs; the step it kept open is ended and, for the HF Trainer,
watch()'s module hooks removed at the switch). Each group's
first step (the switch) and the two steps after an evaluation are left out on both sides. Prints per run
its clock line and
  interleave framework=F mode=M round=R group=G on_steps=.. off_steps=.. ... pair_mean=..% pair_se=..% ...
             traced_lines=.. estimate_mean=..%
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")  # one GPU: HF's Trainer would wrap the model in DataParallel

import steptrace  # noqa: F401,E402  (before torch, as a user's script does)
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # default_cost_summary: one reader of steptrace's lines
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))  # framework_models: the callbacks' test's model
from default_cost_summary import read_lines  # noqa: E402
import interleave  # noqa: E402  (beside this file: --interleave's comparison)
from framework_hooks import (CallTimes, Gate, Probe, gated_lightning, gated_transformers,  # noqa: E402
                             lightning_probe, transformers_probe)
import framework_models  # noqa: E402

VOCAB, SEQ, BATCH, ACCUMULATE, EVAL_EVERY = 1000, 64, 4, 2, 100


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=600, help="optimizer steps per framework")
    p.add_argument("--steady-from", type=int, default=250, help="the first step counted as steady")
    p.add_argument("--out", default="", help="where the lines go (a temporary folder if empty)")
    p.add_argument("--frameworks", default="lightning,transformers")
    p.add_argument("--line-detail", default="", help="full: the overhead's parts in the lines (default: the defaults' compact lines)")
    p.add_argument("--against-off", type=int, default=0, metavar="R",
                   help="R rounds of the --modes, each run a fresh process timed by this script's own step clock")
    p.add_argument("--modes", default="off,default", help="--against-off's modes (MODES): off,default,host,nocupti,"
                   "nomarkers,nocounters,nomem,disabled")
    p.add_argument("--interleave", type=int, default=0, metavar="G",
                   help="the in-run comparison: --rounds trainings per framework on the defaults, the optimizer steps "
                        "from --steady-from on alternating G with steptrace's callback, G without (see above)")
    p.add_argument("--rounds", type=int, default=3, help="--interleave's trainings per framework, one process each")
    p.add_argument("--one", nargs=3, metavar=("FRAMEWORK", "MODE", "ROUND"), help=argparse.SUPPRESS)
    p.add_argument("--probe", action="store_true", help="what any Python call costs inside the hooks (see above)")
    p.add_argument("--hook-times", action="store_true",
                   help="--interleave: time each call into the callback from outside, every on step, and the "
                        "garbage collector per step on both sides (adds ~1 us a hook to the on side)")
    p.add_argument("--time-calls", action="store_true",
                   help="what the callbacks' timed calls hold: each kind of call, and the extension's step calls "
                        "inside them, timed (their medians in us), and the values handed to the runtime")
    return p.parse_args(argv)


def dataset(n):
    return framework_models.dataset(torch, n, VOCAB, SEQ)


class StepClock:
    """The time of each optimizer step's end (time.perf_counter), as the framework's loop reaches it."""

    def __init__(self):
        self.ends = []

    def step_ms(self, steady_from):
        d = [1e3 * (b - a) for a, b in zip(self.ends, self.ends[1:])]
        return d[steady_from:]


def lightning_clock(pl, clock):
    class Clock(pl.Callback):
        def on_train_batch_end(self, trainer, *args, **kwargs):
            if len(clock.ends) < trainer.global_step:  # an optimizer step ended with this batch
                clock.ends.append(time.perf_counter())
    return Clock()


def transformers_clock(transformers, clock):
    class Clock(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            clock.ends.append(time.perf_counter())
    return Clock()


def run_lightning(steps, log, settings, clock=None, steptrace_on=True, probe=None, gate=None):
    import steptrace.lightning as stl
    pl = sys.modules.get("lightning.pytorch") or sys.modules.get("pytorch_lightning")
    callback = stl.StepTrace(**{"log_path": log, **settings}) if steptrace_on else None
    if callback is not None and gate is not None:
        callback = gated_lightning(pl, callback, gate)
    loader = torch.utils.data.DataLoader(dataset(steps * ACCUMULATE * BATCH), batch_size=BATCH)
    val = torch.utils.data.DataLoader(dataset(2 * BATCH), batch_size=BATCH)
    trainer = pl.Trainer(max_steps=steps, accumulate_grad_batches=ACCUMULATE, accelerator="gpu", devices=1,
                         val_check_interval=EVAL_EVERY * ACCUMULATE, limit_val_batches=2, num_sanity_val_steps=0,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False,
                         callbacks=([lightning_probe(pl, probe)] if probe else []) +
                                   ([callback] if callback is not None else []) +
                                   ([lightning_clock(pl, clock)] if clock else []))
    trainer.fit(framework_models.lightning_module(pl, torch, VOCAB), loader, val)


def run_transformers(steps, log, settings, clock=None, steptrace_on=True, probe=None, gate=None):
    import steptrace.transformers as sth
    import transformers
    callback = sth.StepTraceCallback(**{"log_path": log, **settings}) if steptrace_on else None
    if callback is not None and gate is not None:
        callback = gated_transformers(transformers, callback, gate)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=128, n_layer=2, n_head=4)
    model = transformers.GPT2LMHeadModel(config)
    train = [dict(d, labels=d["input_ids"]) for d in dataset(steps * ACCUMULATE * BATCH)]
    evals = [dict(d, labels=d["input_ids"]) for d in dataset(2 * BATCH)]
    args = transformers.TrainingArguments(output_dir=os.path.join(os.path.dirname(log), "hf"), max_steps=steps,
                                          per_device_train_batch_size=BATCH, per_device_eval_batch_size=BATCH,
                                          gradient_accumulation_steps=ACCUMULATE, eval_strategy="steps",
                                          eval_steps=EVAL_EVERY, save_strategy="no", report_to=[],
                                          logging_steps=100000, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=train, eval_dataset=evals,
                                   callbacks=([transformers_probe(transformers, probe)] if probe else []) +
                                             ([callback] if callback is not None else []) +
                                             ([transformers_clock(transformers, clock)] if clock else []))
    trainer.train()


def summary(name, log, steady_from):
    steps, _ = read_lines(log)
    steps = steps or []
    steady = [s for s in steps if (s.get("global_step") or 0) >= steady_from]
    if not steady:
        return f"framework={name} lines={len(steps)} steady=0 (fewer steps than --steady-from)"
    ov = [s.get("overhead") or {} for s in steady]
    est = [o.get("estimated_fraction") for o in ov if o.get("estimated_fraction") is not None]
    times = [s["step_time_ms"] for s in steady if s.get("step_time_ms") is not None]
    last = ov[-1]

    def show(v):
        return "-" if v is None else json.dumps(v)

    fields = [f"framework={name}", f"lines={len(steps)}", f"steady={len(steady)}",
              f"traced={sum(1 for s in steady if s.get('traced'))}",
              f"step_ms_median={statistics.median(times):.3f}" if times else "step_ms_median=-",
              f"trace_every_last={show(last.get('trace_every'))}",
              f"estimate_mean={statistics.mean(est):.5f}" if est else "estimate_mean=-",
              f"estimate_last={show(last.get('estimated_fraction'))}",
              f"over_budget={sum(1 for o in ov if o.get('within_budget') is False)}",
              f"within_budget_last={show(last.get('within_budget'))}",
              f"markers_every_last={show(last.get('markers_every'))}",
              f"untraced_cupti_last={show(last.get('untraced_cupti'))}",
              f"method_last={show(last.get('method'))}",
              f"traced_step_extra_ms_last={show(last.get('traced_step_extra_ms'))}",
              f"clean_step_ms_last={show(last.get('clean_step_ms'))}",
              "parts_last=" + json.dumps({k: v.get("fraction") for k, v in (last.get("parts") or {}).items()
                                          if isinstance(v, dict)}, separators=(",", ":"))]
    return " ".join(fields)


def main(argv):
    a = parse(argv)
    if not torch.cuda.is_available():
        print("framework_budget: no GPU")
        return 1
    out = a.out or tempfile.mkdtemp(prefix="steptrace-frameworks-")
    os.makedirs(out, exist_ok=True)
    runs = {"lightning": run_lightning, "transformers": run_transformers}
    if a.one:
        return one_run(a, runs, out)
    if a.against_off:
        return against_off(a, runs, out)
    if a.interleave:
        return interleave_rounds(a, out)
    for name in a.frameworks.split(","):
        log = os.path.join(out, f"{name}.jsonl")
        if os.path.exists(log):
            os.remove(log)
        times = CallTimes() if a.time_calls else None
        probe = Probe() if a.probe else None
        try:
            runs[name](a.steps, log, {"line_detail": a.line_detail} if a.line_detail else {}, probe=probe)
        except ImportError as e:
            print(f"framework={name} skipped: {e}")
            continue
        print(summary(name, log, a.steady_from), flush=True)
        if times:
            print(times.report(name), flush=True)
        if probe:
            print(probe.report(name), flush=True)
    return 0


# --against-off's modes: what each run gives steptrace's callback (None: no callback at all).
MODES = {
    "off": None,
    "default": {},
    "host": {"gpu": "off"},             # the callbacks and the runtime, nothing of CUDA: the Python bookkeeping
    "hostnolog": {"gpu": "off", "log_path": ""},  # ... and no line made or written (the background thread's share)
    "nocupti": {"cupti": "off"},        # ... with the stream markers and memory sampling, no CUPTI
    "nomarkers": {"stream_markers": False},
    "nocounters": {"counters": "off"},  # no PM sampling
    "nomem": {"memory_sample_ms": 60000},  # device memory and NVML read once a minute, not every 10 ms
    "disabled": {"enabled": False},     # the hooks called, steptrace never started: their dispatch alone
}


def one_run(a, runs, out):
    """--one F MODE ROUND: one training in this process, timed by StepClock; prints its clock line."""
    name, mode, r = a.one[0], a.one[1], int(a.one[2])
    settings = MODES[mode]
    log = os.path.join(out, f"{name}_{r}_{mode}.jsonl")
    if os.path.exists(log):
        os.remove(log)
    clock = StepClock()
    probe = Probe() if a.probe else None
    # --interleave: the clock's i-th time is optimizer step steady_from + 1 + i's (from the end of the one
    # before to its own end); the steps before are all with steptrace (its start-up and the budget's settling).
    switch = interleave.schedule(max(0, a.steps - a.steady_from - 1), a.interleave, on_first=r % 2 == 0) \
        if a.interleave and settings is not None else None
    gate = Gate(lambda k: k <= a.steady_from or k - a.steady_from - 1 >= len(switch) or switch[k - a.steady_from - 1],
                timing=a.hook_times) if switch is not None else None
    try:
        runs[name](a.steps, log, dict(settings or {}), clock=clock, steptrace_on=settings is not None, probe=probe,
                   gate=gate)
    except ImportError as e:
        print(f"framework={name} skipped: {e}")
        return 0
    ms = clock.step_ms(a.steady_from)
    est = []
    if settings is not None and os.path.exists(log):
        lines, _ = read_lines(log)
        est = [(s.get("overhead") or {}).get("estimated_fraction") for s in lines or []
               if (s.get("global_step") or 0) >= a.steady_from]
        est = [e for e in est if e is not None]
    print(f"clock framework={name} round={r} mode={mode} steps={len(ms)} "
          f"median_ms={statistics.median(ms) if ms else float('nan'):.4f} "
          f"mean_ms={statistics.mean(ms) if ms else float('nan'):.4f} "
          f"estimate_mean={statistics.mean(est) if est else float('nan'):.5f}", flush=True)
    if probe:
        print(probe.report(f"{name} mode={mode} round={r}"), flush=True)
    if switch is not None:
        print(interleaved(a, name, mode, r, log, ms, switch, gate), flush=True)
    return 0


def interleaved(a, name, mode, r, log, ms, switch, gate=None):
    """--interleave: one training's on steps against its off steps (benchmarks/interleave.py). Left out on
    both sides: each group's first step (the switch's own work) and the two steps after an evaluation.
    The traced lines are counted, not placed (a callback's lines are not one per framework step: the off
    groups beside a trace are not found and stay in)."""
    n = min(len(ms), len(switch))
    ms, switch = ms[:n], switch[:n]
    skip = [i for i in range(n) if i % a.interleave == 0 or (a.steady_from + 1 + i) % EVAL_EVERY in (0, 1)]
    d = interleave.compare(ms, switch, a.interleave, skip=skip)
    hooks = ""
    if gate is not None and gate.timing:  # the gate's step k is timed step k - steady_from - 1
        kept = [i for i in range(n) if i not in set(skip)]
        hooks = "\n" + gate.report(f"{name} mode={mode} round={r}",
                                    [a.steady_from + 1 + i for i in kept if switch[i]],
                                    [a.steady_from + 1 + i for i in kept if not switch[i]])
    lines, _ = read_lines(log) if os.path.exists(log) else (None, None)
    late = [s for s in lines or [] if (s.get("global_step") or 0) > a.steady_from]
    times = sorted(s["step_time_ms"] for s in late if s.get("step_time_ms") is not None)
    usual = 2 * times[len(times) // 2] if times else float("inf")  # a line spanning an off group is left out
    est = [(s.get("overhead") or {}).get("estimated_fraction") for s in late
           if s.get("step_time_ms") is not None and s["step_time_ms"] < usual]
    est = [e for e in est if e is not None]
    traced = sum(1 for s in late if s.get("traced"))
    if traced:  # an off group beside a trace may have run with CUPTI attached: it is in the off side
        print(f"framework_budget: {name} round {r}: {traced} traced lines in the timed steps; the off groups "
              "beside them are not found and stay in (the cost reads low by what they paid)", file=sys.stderr)
    return (f"interleave framework={name} mode={mode} round={r} group={a.interleave} {interleave.describe(d)} "
            f"traced_lines={traced} "
            f"estimate_mean={100 * statistics.mean(est) if est else float('nan'):.4f}%" + hooks)


def against_off(a, runs, out):
    """--against-off R: R rounds of the --modes, each training in a fresh process (a process's later
    trainings run faster than its first: in one process the order would be the difference), the modes'
    order rotated round by round so each takes each place; each mode's cost is its mean step time over
    off's in the same round. A time limit's SIGTERM ends the rounds; what was measured is summed up."""
    import signal

    def stopped(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, stopped)
    modes = a.modes.split(",")
    if "off" not in modes:
        modes = ["off"] + modes
    for name in a.frameworks.split(","):
        got = {}  # (round, mode) -> (mean_ms, median_ms, estimate)
        try:
            run_rounds(a, name, modes, out, got)
        except KeyboardInterrupt:
            print(f"against_off framework={name}: cut short; the rounds so far", flush=True)
            summarise(a, name, modes, got)
            return 0  # the time is up: no next framework
        summarise(a, name, modes, got)
    return 0


def interleave_rounds(a, out):
    """--interleave G: --rounds trainings per framework and mode (--modes but off; `default` when that
    leaves none), each in its own process (`--one F MODE R --interleave G`), the modes rotated per round."""
    import subprocess
    modes = [m for m in a.modes.split(",") if m and m != "off"] or ["default"]
    for name in a.frameworks.split(","):
        for r in range(a.rounds):
            for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
                cmd = [sys.executable, os.path.abspath(__file__), "--one", name, mode, str(r), "--steps", str(a.steps),
                       "--steady-from", str(a.steady_from), "--out", out, "--interleave", str(a.interleave)] + \
                    (["--hook-times"] if a.hook_times else [])
                p = subprocess.run(cmd, capture_output=True, text=True)
                rows = [l for l in p.stdout.splitlines() if l.startswith(("clock ", "interleave ", "hooks ", "framework="))]
                for row in rows:
                    print(row, flush=True)
                if p.returncode or not rows:
                    print(f"run framework={name} round={r} mode={mode} rc={p.returncode}: "
                          + " | ".join(p.stderr.strip().splitlines()[-3:]), flush=True)
    return 0


def run_rounds(a, name, modes, out, got):
    import subprocess
    for r in range(a.against_off):
        for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
            cmd = [sys.executable, os.path.abspath(__file__), "--one", name, mode, str(r), "--steps", str(a.steps),
                   "--steady-from", str(a.steady_from), "--out", out] + (["--probe"] if a.probe else [])
            p = subprocess.run(cmd, capture_output=True, text=True)
            rows = [l for l in p.stdout.splitlines() if l.startswith(("clock ", "probe ", "framework="))]
            for row in rows:
                print(row, flush=True)
                if row.startswith("clock "):
                    f = dict(kv.split("=", 1) for kv in row.split()[1:])
                    got[(r, mode)] = (float(f["mean_ms"]), float(f["median_ms"]), float(f["estimate_mean"]))
            if p.returncode or not rows:
                print(f"run framework={name} round={r} mode={mode} rc={p.returncode}: "
                      + " | ".join(p.stderr.strip().splitlines()[-3:]), flush=True)


def summarise(a, name, modes, got):
    def pcts(v):
        return ", ".join(f"{100 * x:+.2f}" for x in v) + " %" if v else "-"
    for mode in modes:
        if mode == "off":
            continue
        done = [r for r in range(a.against_off) if (r, mode) in got and (r, "off") in got]
        by_mean = [got[(r, mode)][0] / got[(r, "off")][0] - 1 for r in done]
        by_median = [got[(r, mode)][1] / got[(r, "off")][1] - 1 for r in done]
        est = [got[(r, mode)][2] for r in done if got[(r, mode)][2] == got[(r, mode)][2]]
        print(f"against_off framework={name} mode={mode} rounds={len(done)} cost_by_means={pcts(by_mean)} "
              f"mean={pcts([statistics.mean(by_mean)] if by_mean else [])} "
              f"median={pcts([statistics.median(by_mean)] if by_mean else [])} "
              f"cost_by_medians={pcts(by_median)} estimate_mean={pcts([statistics.mean(est)] if est else [])}",
              flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
