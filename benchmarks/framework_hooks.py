"""What benchmarks/framework_budget.py puts into a framework's hooks besides steptrace's callback: the
timed calls (--time-calls: CallTimes), the probe of what any Python call costs there (--probe: Probe and its
hooks), and the in-run comparison's gate (--interleave: Gate, gated_lightning, gated_transformers). Each
takes the framework's module as an argument: nothing here imports Lightning or transformers."""
import os
import statistics
import sys
import time

import steptrace


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
        for name in ("step_enter", "step_exit", "step_work_done", "phase_enter", "phase_exit", "phase_switch"):
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


def _noop():
    pass


def _probe_once(into):
    """A no-op Python call, a no-op extension call and a clock pair, timed once each into `into`."""
    ext, clock = steptrace._steptrace.is_running, time.perf_counter_ns
    t0 = clock()
    _noop()
    t1 = clock()
    ext()
    t2 = clock()
    t3 = clock()
    into["noop"].append(t1 - t0)
    into["ext"].append(t2 - t1)
    into["clock"].append(t3 - t2)


class Probe:
    """--probe: a Python no-op, an extension no-op and a clock pair timed where the hooks run (see above)."""

    def __init__(self):
        self.hook = {"noop": [], "ext": [], "clock": []}
        self.batches = 0
        self.env = ""

    def at_hook(self):
        self.batches += 1
        if self.batches % 7:
            return
        _probe_once(self.hook)
        if not self.env:
            import threading
            mon = getattr(sys, "monitoring", None)
            tools = [mon.get_tool(i) for i in range(6)] if mon else "-"
            self.env = (f"profile={sys.getprofile()!r} trace={sys.gettrace()!r} monitoring={tools!r} "
                        f"threads={[t.name for t in threading.enumerate()]!r} "
                        f"cpus={len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else '-'} "
                        f"switchinterval_ms={1e3 * sys.getswitchinterval():.1f}").replace(" ", "_").replace("=_", "=")

    def report(self, name):
        loop = {"noop": [], "ext": [], "clock": []}
        for _ in range(2000):
            _probe_once(loop)
        rows = []
        for where, got in (("hook", self.hook), ("loop", loop)):
            if got["noop"]:
                rows.append(f"probe framework={name} where={where} " +
                            " ".join(f"{k}_ns={statistics.median(v):.0f}" for k, v in got.items()) +
                            f" n={len(got['noop'])}")
        rows.append(f"probe framework={name} {self.env}")
        return "\n".join(rows)


def lightning_probe(pl, probe):
    class ProbeHook(pl.Callback):
        def on_train_batch_start(self, *args, **kwargs):
            probe.at_hook()
    return ProbeHook()


def transformers_probe(transformers, probe):
    class ProbeHook(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            probe.at_hook()
    return ProbeHook()


class Gate:
    """--interleave's switch: whether optimizer step k runs with steptrace's callback (`on_of_step`), decided
    at the step's first hook; at a switch, `at_step`'s off_now / on_now run first (inside the switching
    step's time: that step is left out of the comparison on both sides). With `timing` (--hook-times), each
    call into the callback is timed from outside (`call`: per step and per hook, every step, tails
    included) and the garbage collector's passes are timed per step on both sides (gc.callbacks)."""

    def __init__(self, on_of_step, timing=False):
        self.on_of_step = on_of_step
        self.active = True
        self.k = None  # the optimizer step the hooks now run in (its first hook's global_step)
        self.timing = timing
        self.hook_ns = {}   # step -> ns in the callback's calls (on steps)
        self.by_hook = {}   # hook name -> [ns of each call] (on steps)
        self.gc_ns = {}     # step -> ns in garbage collection (both sides)
        self._gc_t0 = None
        self.steps = None   # the callback's CallbackSteps (gated_*): its self-timed steps are compared
        self.timed = {}     # step the callback timed itself -> ns from outside (its hooks' calls)
        self.self_timed = {}  # ... -> (ns it timed of its own calls, calls, markers' ns, its sample's ns)
        if timing:
            import gc
            gc.callbacks.append(self._gc)

    def _gc(self, phase, info):
        if phase == "start":
            self._gc_t0 = time.perf_counter_ns()
        elif self._gc_t0 is not None:
            self.gc_ns[self.k] = self.gc_ns.get(self.k, 0) + time.perf_counter_ns() - self._gc_t0
            self._gc_t0 = None

    def at_step(self, k, off_now, on_now):
        self.k = k
        want = self.on_of_step(k)
        if want != self.active:
            (on_now if want else off_now)()
            self.active = want

    def watch_self_timing(self, steps):
        """The callback's own timing (CallbackSteps._timed_step_ends) read on each step it timed."""
        self.steps = steps
        cls = type(steps)
        ends = cls._timed_step_ends
        gate = self

        def timed_step_ends(obj, keep):
            if obj is gate.steps and obj._timed_step and keep:
                kept = not obj._tainted and steptrace._steptrace.is_running()  # the method's own test
                ends(obj, keep)
                gate.self_timed[gate.k] = (obj._spent, obj._calls, obj._markers, obj._samples[-1] if kept else None)
                return None
            return ends(obj, keep)
        cls._timed_step_ends = timed_step_ends

    def call(self, name, f, *args, **kwargs):
        if not self.timing:
            return f(*args, **kwargs)
        timed = self.steps is not None and self.steps._timed_step
        t0 = time.perf_counter_ns()
        try:
            return f(*args, **kwargs)
        finally:
            ns = time.perf_counter_ns() - t0
            self.hook_ns[self.k] = self.hook_ns.get(self.k, 0) + ns
            self.by_hook.setdefault(name, []).append(ns)
            if timed or (self.steps is not None and self.steps._timed_step):
                self.timed[self.k] = self.timed.get(self.k, 0) + ns

    def report(self, name, on_steps, off_steps):
        """--hook-times' line: the callback's time per on step as timed from outside, and the garbage
        collector's per step on each side."""
        def stats(v):
            v = sorted(v)
            if not v:
                return "n=0"
            q = lambda f: v[min(len(v) - 1, int(f * len(v)))] / 1e3  # noqa: E731
            return (f"n={len(v)} mean_us={statistics.mean(v) / 1e3:.1f} median_us={q(0.5):.1f} p90_us={q(0.9):.1f} "
                    f"p99_us={q(0.99):.1f} max_us={v[-1] / 1e3:.1f}")
        rows = [f"hooks framework={name} per_on_step " + stats([self.hook_ns.get(k, 0) for k in on_steps])]
        for side, steps in (("on", on_steps), ("off", off_steps)):
            g = [self.gc_ns.get(k, 0) for k in steps]
            rows.append(f"hooks framework={name} gc_{side} steps_with_gc={sum(1 for x in g if x)} "
                        f"gc_us_per_step={statistics.mean(g) / 1e3 if g else float('nan'):.2f}")
        for hook in sorted(self.by_hook):
            rows.append(f"hooks framework={name} hook={hook} " + stats(self.by_hook[hook]))
        both = sorted(k for k in self.self_timed if k in self.timed)
        if both:  # the steps the callback timed itself: what it saw against what its hooks took from outside
            spent = [self.self_timed[k][0] for k in both]
            samples = [self.self_timed[k][3] for k in both if self.self_timed[k][3] is not None]
            rows.append(f"hooks framework={name} self_timed_steps={len(both)} "
                        f"outside_us_median={statistics.median([self.timed[k] for k in both]) / 1e3:.1f} "
                        f"outside_us_mean={statistics.mean([self.timed[k] for k in both]) / 1e3:.1f} "
                        f"spent_us_median={statistics.median(spent) / 1e3:.1f} "
                        f"calls_median={statistics.median([self.self_timed[k][1] for k in both]):.0f} "
                        f"markers_us_median={statistics.median([self.self_timed[k][2] for k in both]) / 1e3:.1f} "
                        f"sample_us_median={statistics.median(samples) / 1e3 if samples else float('nan'):.1f} "
                        f"extra_us_charged={steptrace._steptrace.step_extra_ns() / 1e3:.1f}")
        return "\n".join(rows)


def _forward(name, gate=None):
    def hook(self, *args, **kwargs):
        if gate is None:
            return getattr(self.inner, name)(*args, **kwargs)
        if gate.active:
            return gate.call(name, getattr(self.inner, name), *args, **kwargs)
        return None
    return hook


def gated_lightning(pl, inner, gate):
    """steptrace's Lightning callback behind the gate: off, none of its step hooks is called and the step it
    kept open is ended at the switch."""
    if gate.timing:
        gate.watch_self_timing(inner._steps)
    class Gated(pl.Callback):
        def __init__(self):
            super().__init__()
            self.inner = inner

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            gate.at_step(trainer.global_step, inner._steps.close_now, lambda: None)
            if gate.active:
                gate.call("on_train_batch_start", inner.on_train_batch_start, trainer, pl_module, batch, batch_idx)
    for n in ("on_fit_start", "on_train_end", "on_validation_start", "on_train_epoch_end", "on_save_checkpoint",
              "on_fit_end", "on_exception"):
        setattr(Gated, n, _forward(n))
    for n in ("on_before_backward", "on_after_backward", "on_before_optimizer_step", "on_train_batch_end"):
        setattr(Gated, n, _forward(n, gate))
    return Gated()


def gated_transformers(transformers, inner, gate):
    """steptrace's HF Trainer callback behind the gate: off, none of its step hooks is called, the step it
    kept open is ended and steptrace.watch()'s module hooks are removed at the switch (put back at the
    next); its token-counting forward hook stays (it returns at once with no step open)."""
    if gate.timing:
        gate.watch_self_timing(inner._steps)
    class Gated(transformers.TrainerCallback):
        def __init__(self):
            self.inner = inner

        def on_step_begin(self, args, state, control, **kwargs):
            model = kwargs.get("model")

            def off_now():
                inner._steps.close_now()
                if inner._watching:
                    steptrace.unwatch()

            def on_now():
                if inner._watching and model is not None:
                    steptrace.watch(model)
            gate.at_step(state.global_step, off_now, on_now)
            if gate.active:
                gate.call("on_step_begin", inner.on_step_begin, args, state, control, **kwargs)
    for n in ("on_train_begin", "on_train_end"):
        setattr(Gated, n, _forward(n))
    for n in ("on_pre_optimizer_step", "on_optimizer_step", "on_step_end"):
        setattr(Gated, n, _forward(n, gate))
    return Gated()
