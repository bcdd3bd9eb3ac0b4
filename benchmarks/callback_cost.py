#!/usr/bin/env python3
"""What the framework callbacks' step bookkeeping costs the training thread per optimizer step, against
what the lines' estimate charges for it (overhead.parts.host_api: calls x 0.72 µs, core/overhead_parts.hpp).
No GPU needed: steptrace runs with gpu=off, so only the Python side and steptrace's host calls are timed.

    callback_cost.py [--steps 20000] [--accumulate 2] [--repeats 5]

Each optimizer step drives steptrace._callback_steps.CallbackSteps (what steptrace.lightning's StepTrace
runs) in Lightning's hook order: per micro-batch on_train_batch_start (open_step, count_batch,
enter("forward")), on_before_backward (enter("backward")), on_after_backward (exit); once per step
on_before_optimizer_step (enter("optimizer")) and on_train_batch_end (exit, close_step). The batches are
dicts whose input_ids has numel() and shape, as a tensor's. Without steptrace the framework would call
none of it, so its cost is the loop's time less an empty loop's (`cost_us`); the same calls with steptrace
stopped (each returns at its first check: `stopped_us`) split it into the Python bookkeeping and the
rest (steptrace's host calls and what they do).

Prints per repeat and their median (the lines are full: the phases' counts are not on compact ones):
  repeat=R steps=N on_us=.. stopped_us=.. empty_us=.. cost_us=.. model_us=.. charged_us=.. calls=..
where model_us = calls x 0.72 µs, calls = 1 + the step's phase scopes + its scalars (the ledger's count:
details/worker_overhead.hpp), read from the lines written; charged_us = model_us + what the callbacks
measured of their own bookkeeping beyond the model (timed on one step in 37, the median of the last 9:
steptrace._callback_steps), which the lines' host_api charges per step. The median line also prints
charged/measured: the estimate against the measurement.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import steptrace
from steptrace import _steptrace
from steptrace._callback_steps import CallbackSteps

from default_cost_summary import read_lines  # beside this file: one reader of steptrace's lines

PYTHON_CALL_US = 0.72  # core/overhead_parts.hpp OverheadLedger::kPythonScopeNs


class _Ids:
    """Stands in for a batch's input_ids tensor: numel() and shape, nothing else."""
    shape = (4, 64)

    def numel(self):
        return 256


def one_step(steps, batch, accumulate):
    for _ in range(accumulate):
        steps.open_step()
        steps.count_batch(batch)
        steps.enter("forward")
        steps.enter("backward")
        steps.exit()
    steps.enter("optimizer")
    steps.exit()
    steps.close_step()


def timed(steps, batch, n, accumulate):
    t0 = time.perf_counter()
    for _ in range(n):
        one_step(steps, batch, accumulate)
    return (time.perf_counter() - t0) / n * 1e6


def timed_empty(n, accumulate):
    t0 = time.perf_counter()
    for _ in range(n):
        for _ in range(accumulate):
            pass
    return (time.perf_counter() - t0) / n * 1e6


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--accumulate", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args(argv)
    batch = {"input_ids": _Ids()}
    out = tempfile.mkdtemp(prefix="steptrace-callback-cost-")
    rows = []
    for r in range(a.repeats):
        log = os.path.join(out, f"r{r}.jsonl")
        steps = CallbackSteps("auto", "auto", dict(log_path=log, gpu="off", summary=False, line_detail="full"),
                              "callback_cost")
        steps.begin_training()
        on = timed(steps, batch, a.steps, a.accumulate)
        extra = _steptrace.step_extra_ns() / 1e3  # what the callbacks measured beyond the model, per step
        steps.close_now()
        steps.end_training()
        stopped = timed(steps, batch, a.steps, a.accumulate)  # every call returns at its first check
        empty = timed_empty(a.steps, a.accumulate)
        last = read_lines(log)[0][-1]  # full lines: the phases' counts are not on compact ones
        calls = 1 + sum(v.get("count", 0) for v in last["phases"].values()) + len(last.get("scalars") or {})
        charged = calls * PYTHON_CALL_US + extra
        rows.append((on, stopped, empty, on - empty, calls * PYTHON_CALL_US, charged, calls))
        print(f"repeat={r} steps={a.steps} on_us={on:.2f} stopped_us={stopped:.2f} empty_us={empty:.2f} "
              f"cost_us={on - empty:.2f} model_us={calls * PYTHON_CALL_US:.2f} charged_us={charged:.2f} "
              f"calls={calls}", flush=True)
    med = [statistics.median(col) for col in zip(*rows)]
    print(f"median on_us={med[0]:.2f} stopped_us={med[1]:.2f} empty_us={med[2]:.2f} cost_us={med[3]:.2f} "
          f"model_us={med[4]:.2f} charged_us={med[5]:.2f} measured/model={med[3] / med[4]:.2f} "
          f"charged/measured={med[5] / med[3]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
