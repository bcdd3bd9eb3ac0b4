#!/usr/bin/env python3
"""Whether the default budget holds on short framework steps: PyTorch Lightning and the Hugging Face Trainer,
each with steptrace's callback on the defaults (no setting but the log path), trained long enough for the
budget's controller to settle.

    framework_budget.py [--steps 600] [--steady-from 250] [--out DIR] [--frameworks lightning,transformers]
                        [--line-detail full] [--time-calls] [--against-off R]

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

--against-off R: R rounds per framework, each training once without steptrace's callback (`off`) and once
with it (`default`), in an order shuffled per round, both timed by the same clock (a callback of this
script: the time between optimizer steps' ends, as the framework's loop runs them). Prints per run
  clock framework=F round=R mode=M steps=S median_ms=.. mean_ms=..   (the steps from --steady-from on)
and per framework the default's cost against off by each round's means and medians, beside the mean
estimate of its lines: what the lines say steptrace costs, checked against the program's own clock.
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
                   help="R rounds of off/default runs, timed by this script's own step clock")
    p.add_argument("--time-calls", action="store_true",
                   help="what the callbacks' timed calls hold: each kind of call, and the extension's step calls "
                        "inside them, timed (their medians in us), and the values handed to the runtime")
    return p.parse_args(argv)


class CallTimes:
    """--time-calls: wraps steptrace._callback_steps.CallbackSteps._timed (each timed call by method, with the
    markers' record time timing_marks() saw inside it) and, while a timed call runs, the extension's step
    calls and the pending-value wait, so that a timed step's sample can be read part by part. The wrappers
    add their own Python time (~0.2-0.5 us a wrapped call) to what they wrap."""

    def __init__(self):
        import collections
        from steptrace import _callback_steps as cs
        import steptrace
        ext = steptrace._steptrace
        self.ns = collections.defaultdict(list)
        self.extra = []
        inside = [0]
        ns = self.ns
        timed = cs.CallbackSteps._timed

        def timed_by_method(obj, method, *args):
            m0 = ext.timing_marks()[0]
            t0 = time.perf_counter_ns()
            inside[0] += 1
            try:
                return timed(obj, method, *args)
            finally:
                inside[0] -= 1
                ns["call " + method.__name__].append(time.perf_counter_ns() - t0)
                ns["markers in " + method.__name__].append(ext.timing_marks()[0] - m0)
        cs.CallbackSteps._timed = timed_by_method

        def wrap(owner, name, label):
            f = getattr(owner, name, None)
            if f is None:
                return

            def w(*a, **k):
                if not inside[0]:
                    return f(*a, **k)
                t0 = time.perf_counter_ns()
                try:
                    return f(*a, **k)
                finally:
                    ns[label].append(time.perf_counter_ns() - t0)
            setattr(owner, name, w)
        for name in ("step_enter", "step_exit", "step_work_done", "phase_enter", "phase_exit"):
            wrap(ext, name, "ext." + name)
        wrap(steptrace, "_resolve_pending", "steptrace._resolve_pending")
        wrap(steptrace._ranks, "_pump", "steptrace._ranks._pump")
        set_extra = ext.set_step_extra_ns

        def record_extra(v):
            self.extra.append(v)
            return set_extra(v)
        ext.set_step_extra_ns = record_extra

    def report(self, name):
        rows = []
        for key in sorted(self.ns):
            v = self.ns[key]
            rows.append(f"{key}: n={len(v)} median_us={statistics.median(v) / 1e3:.2f} "
                        f"p90_us={sorted(v)[int(0.9 * (len(v) - 1))] / 1e3:.2f} sum_us={sum(v) / 1e3:.1f}")
        set_values = [round(v / 1e3, 2) for v in self.extra if v > 0]
        return (f"calls framework={name}\n  " + "\n  ".join(rows) +
                f"\n  set_step_extra_us={set_values[-12:]}")


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


def run_lightning(steps, log, settings, clock=None, steptrace_on=True):
    import steptrace.lightning as stl
    pl = sys.modules.get("lightning.pytorch") or sys.modules.get("pytorch_lightning")
    loader = torch.utils.data.DataLoader(dataset(steps * ACCUMULATE * BATCH), batch_size=BATCH)
    val = torch.utils.data.DataLoader(dataset(2 * BATCH), batch_size=BATCH)
    trainer = pl.Trainer(max_steps=steps, accumulate_grad_batches=ACCUMULATE, accelerator="gpu", devices=1,
                         val_check_interval=EVAL_EVERY * ACCUMULATE, limit_val_batches=2, num_sanity_val_steps=0,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False,
                         callbacks=([stl.StepTrace(log_path=log, **settings)] if steptrace_on else []) +
                                   ([lightning_clock(pl, clock)] if clock else []))
    trainer.fit(framework_models.lightning_module(pl, torch, VOCAB), loader, val)


def run_transformers(steps, log, settings, clock=None, steptrace_on=True):
    import steptrace.transformers as sth
    import transformers
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
                                   callbacks=([sth.StepTraceCallback(log_path=log, **settings)] if steptrace_on else []) +
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
    if a.against_off:
        return against_off(a, runs, out)
    for name in a.frameworks.split(","):
        log = os.path.join(out, f"{name}.jsonl")
        if os.path.exists(log):
            os.remove(log)
        times = CallTimes() if a.time_calls else None
        try:
            runs[name](a.steps, log, {"line_detail": a.line_detail} if a.line_detail else {})
        except ImportError as e:
            print(f"framework={name} skipped: {e}")
            continue
        print(summary(name, log, a.steady_from), flush=True)
        if times:
            print(times.report(name), flush=True)
    return 0


def against_off(a, runs, out):
    """--against-off: off and default runs of each framework, timed by StepClock, paired per round."""
    import random
    settings = {"line_detail": a.line_detail} if a.line_detail else {}
    for name in a.frameworks.split(","):
        costs_mean, costs_median, estimates = [], [], []
        for r in range(a.against_off):
            modes = ["off", "default"]
            random.Random(r).shuffle(modes)
            got = {}
            for mode in modes:
                log = os.path.join(out, f"{name}_{r}_{mode}.jsonl")
                if os.path.exists(log):
                    os.remove(log)
                clock = StepClock()
                try:
                    runs[name](a.steps, log, settings, clock=clock, steptrace_on=mode == "default")
                except ImportError as e:
                    print(f"framework={name} skipped: {e}")
                    return 0
                ms = clock.step_ms(a.steady_from)
                if not ms:
                    print(f"clock framework={name} round={r} mode={mode} steps=0")
                    continue
                got[mode] = (statistics.mean(ms), statistics.median(ms))
                print(f"clock framework={name} round={r} mode={mode} steps={len(ms)} median_ms={got[mode][1]:.4f} "
                      f"mean_ms={got[mode][0]:.4f}", flush=True)
                if mode == "default":
                    lines, _ = read_lines(log)
                    est = [(s.get("overhead") or {}).get("estimated_fraction") for s in lines or []
                           if (s.get("global_step") or 0) >= a.steady_from]
                    est = [e for e in est if e is not None]
                    if est:
                        estimates.append(statistics.mean(est))
            if "off" in got and "default" in got:
                costs_mean.append(got["default"][0] / got["off"][0] - 1)
                costs_median.append(got["default"][1] / got["off"][1] - 1)

        def pcts(v):
            return ", ".join(f"{100 * x:+.2f}" for x in v) + " %" if v else "-"
        print(f"against_off framework={name} rounds={len(costs_mean)} cost_by_means={pcts(costs_mean)} "
              f"mean={pcts([statistics.mean(costs_mean)] if costs_mean else [])} cost_by_medians={pcts(costs_median)} "
              f"estimate_mean={pcts([statistics.mean(estimates)] if estimates else [])}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
