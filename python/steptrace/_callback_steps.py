"""The step and phase bookkeeping the framework callbacks share (steptrace.lightning, steptrace.transformers):
a step opened at the framework's step begin and, at its end, kept open until the next step begins (so
its time is the iteration's: what the framework does after the optimizer step, a loss read that waits
for the GPU among it, is in the step), or until work that is no step's begins (validation, a checkpoint,
an evaluation forward, the end of training); one phase open at a time, tokens and samples summed over
the step's batches, steptrace started (and stopped at the end of training) when the program has not
started it itself. Where a step begins and ends is the thread's step driver's (steptrace._driver), as for
step(), loader() and watch()."""
import collections
import math
import numbers
import statistics
import threading
import time

import steptrace  # the package is whole by now: this module is imported by its callbacks, never by it

from . import _driver, _steptrace


_NO_IDS = object()  # a batch without input_ids (or not dict-like)


def _input_ids(batch):
    """A dict-like batch's `input_ids`, else _NO_IDS."""
    if isinstance(batch, dict) or hasattr(batch, "keys"):
        try:
            return batch["input_ids"]
        except (KeyError, TypeError, IndexError):
            pass
    return _NO_IDS


def _tokens_of_ids(ids):
    numel = getattr(ids, "numel", None)
    return float(numel()) if callable(numel) else None


def _samples_of_ids(ids):
    shape = getattr(ids, "shape", None)
    return float(shape[0]) if shape is not None and len(shape) > 0 else None


def batch_tokens(batch):
    """Tokens of a batch when it says them plainly: the `input_ids` of a dict-like batch (padding
    included, as the model sees them); None otherwise (give `tokens=`)."""
    ids = _input_ids(batch)
    return None if ids is _NO_IDS else _tokens_of_ids(ids)


def batch_samples(batch):
    """Samples of a batch: the first dimension of its `input_ids` (or of the batch itself, a tensor)."""
    ids = _input_ids(batch)
    if ids is _NO_IDS:
        if isinstance(batch, dict) or hasattr(batch, "keys"):
            return None  # dict-like without input_ids
        ids = batch
    return _samples_of_ids(ids)


def _auto_counts(batch):
    """(batch_tokens(batch), batch_samples(batch)) from one look at the batch; (None, None) where
    batch_tokens has none (the step's counts then take nothing from this batch, as with the two calls)."""
    ids = _input_ids(batch)
    if ids is _NO_IDS:
        return None, None
    t = _tokens_of_ids(ids)
    return (None, None) if t is None else (t, _samples_of_ids(ids))


class CallbackSteps(_driver.Holder):
    """Opens and closes steptrace's steps and phases from a framework's hooks (all on its training thread),
    holding its steps in the thread's step driver."""
    close_at_stop = False  # stopped mid-step: the runtime closes it
    framework = True  # the steps' lines claim no upper end for the cost (docs/python.md)
    yields_to_program = False  # the program's own step() inside a framework step: that step is closed (said)

    def __init__(self, tokens, samples, settings, who):
        if tokens is not None and not callable(tokens) and not _is_auto(tokens):
            tokens = _check_number(who, "tokens", tokens)
        if samples is not None and not callable(samples) and not _is_auto(samples):
            samples = _check_number(who, "samples", samples)
        self.tokens, self.samples, self.settings, self.who = tokens, samples, dict(settings), who
        # Per batch, what gives its counts (None: not counted per batch); decided once, not at every batch.
        self._tokens_of = tokens if callable(tokens) else batch_tokens if _is_auto(tokens) else None
        self._samples_of = samples if callable(samples) else batch_samples if _is_auto(samples) else None
        self._phase_ids = {}   # name -> the extension's phase id, looked up once
        self.kind = who
        self.started = False   # steptrace started here: stopped at the end of training
        self.phase = None      # the open phase's id
        self.step_tokens = self.step_samples = None
        self.owner = None      # the training thread (the one training began on): other threads pass through
        # What this bookkeeping costs per step beyond its calls as modelled: timed on one framework step
        # in TIME_EVERY (while `_timing`, each call's time is summed), the median of the last
        # TIME_SAMPLES told to the runtime, which charges it in the lines' overhead (host_api). Untimed,
        # a call pays one attribute check. (Switching the instance's class for the timed step instead
        # made every call ~0.2 us slower: the interpreter's specialised attribute lookups at the hooks'
        # call sites saw two classes.)
        self._timing = False              # the calls are timed now (a timed step, outside a timed call)
        self._timed_step = False          # a timed step is under way
        self._closed = 0                  # framework steps closed since training began
        self._samples = collections.deque(maxlen=TIME_SAMPLES)
        self._spent = self._calls = self._entered = self._markers = 0
        self._tainted = False             # the timed step met work the lines charge elsewhere: no sample
        self._steps_at_sample = 0         # steps begun in the run as the last sample was taken
        # steptrace was not running as training began (enabled=false, STEPTRACE_ENABLED=0, a start that
        # failed): each call returns at once, but a step's first, which asks whether steptrace runs now
        # (a program that starts it later). In a framework each call costs ~1 us (framework_budget.py
        # --probe): besides the hooks themselves, a Lightning step of 2 micro-batches (its hook order) made
        # 24 Python and 8 built-in or extension calls here with steptrace off, now 12 and 2 (Lightning's
        # callback with steptrace disabled cost ~0.9 % of its 4.5 ms step on an H200, session 69).
        self.idle = False

    # ---- the run ----
    def begin_training(self, known_rank=None, framework=None):
        """`known_rank`: (rank, world_size) as the framework knows them (Lightning's trainer.global_rank,
        the Trainer's args.process_index), given to start() unless the program set a rank; a session the
        program started with another rank is told so, once, by name."""
        from .ranks import check_rank, framework_rank, rank_settings
        self.close_now()  # what an earlier training that raised left open
        self._forget_cost()
        self.owner = threading.get_ident()
        known = known_rank if known_rank is not None else framework_rank()
        if not steptrace.is_running():
            self.started = bool(steptrace.start(**rank_settings(self.settings, known)))
        else:
            check_rank(known, framework or "torch.distributed")
        self.idle = not steptrace.is_running()
        if steptrace.is_running() and self.settings and not self.started:
            _steptrace.warn_once(self.who + ".settings", f"{self.who}: steptrace was already running; its "
                                 f"settings {sorted(self.settings)} were not applied")

    def end_training(self):
        self.close_now()  # (idle: nothing open)
        self._forget_cost()  # this training's cost is no later program's
        if self.started and steptrace.is_running():
            steptrace.stop()
        self.started = self.idle = False

    # ---- what the bookkeeping costs ----
    def _time_next_step(self):
        """At a framework step's end: the next one is timed when it is one in TIME_EVERY (past the start)."""
        self._closed += 1
        if self._closed >= TIME_FROM and self._closed % TIME_EVERY == 0 and _steptrace.is_running():
            if _steptrace.steps_begun() < self._steps_at_sample:
                self._samples.clear()  # steptrace was started again: the samples were another run's
            self._spent = self._calls = self._entered = self._markers = 0
            self._tainted = False
            self._timing = self._timed_step = True

    def _timed(self, method, *args):
        """`method` (a CallbackSteps function) run with its time added to the timed step's; the calls it
        makes in turn (enter's exit, the driver's closing) run untimed inside it. The stream markers'
        records made inside it are taken out (the lines charge them on their own); a step boundary that
        switched tracing inside it (the lines' tracing part) leaves the step without a sample."""
        self._timing = False
        markers, boundaries = _steptrace.timing_marks()
        t0 = time.perf_counter_ns()
        try:
            return method(self, *args)
        finally:
            self._spent += time.perf_counter_ns() - t0
            markers_after, boundaries_after = _steptrace.timing_marks()
            self._markers += max(0, markers_after - markers)
            self._tainted = self._tainted or boundaries_after != boundaries
            self._calls += 1
            self._timing = self._timed_step  # unless the call ended the timed step

    def _timed_step_ends(self, keep):
        """The timed step ends (`keep`: closed as a framework step, its time a sample)."""
        self._timing = self._timed_step = False
        if not keep or self._tainted or not _steptrace.is_running():
            return
        self._steps_at_sample = _steptrace.steps_begun()
        modelled = (1 + self._entered) * _steptrace.python_call_ns  # the step and its phases, as charged
        # Each timed call's way in (the framework's call of the callback's hook, and the hook's call of
        # this object's method up to where the time starts) is outside the time: charged as one modelled
        # Python call each, a low figure (it is two or three calls, ~1 us each between a framework's work).
        # On an H200 the hooks timed from outside took 62-71 us a Lightning step where the timed calls
        # said 52-55 (framework_budget.py --hook-times, session 70; the outside timing's own ~1 us a
        # hook included).
        entries = self._calls * _steptrace.python_call_ns
        self._samples.append(self._spent - self._calls * clock_ns() - self._markers - modelled + entries)
        if len(self._samples) >= TIME_SAMPLES_FIRST:
            _steptrace.set_step_extra_ns(max(0.0, statistics.median(self._samples)))

    def _forget_cost(self):
        self._timing = self._timed_step = False
        self._samples.clear()
        self._steps_at_sample = 0
        _steptrace.set_step_extra_ns(0.0)  # an earlier training's (one that raised) included
        self._closed = 0

    # ---- steps and phases ----
    @property
    def open(self):
        """A step of these callbacks is open on this thread."""
        return _driver.holds(self)

    def closing(self):
        """The driver closes the step: its phase first."""
        self.exit()

    def open_step(self):
        """The framework's step begins: a step, unless one of its micro-batches' is open; one kept open
        ends here (the driver)."""
        if self.idle and not self._wake():
            return
        if self._timing:
            if not self._calls and steptrace._pending:
                # The step kept open (untimed) waits for its values recorded from CUDA tensors as this
                # call closes it: waited for here, outside the time (the GPU's, not the bookkeeping's).
                steptrace._resolve_pending()
            return self._timed(CallbackSteps.open_step)
        tokens = self.tokens if isinstance(self.tokens, float) else None
        samples = self.samples if isinstance(self.samples, float) and tokens is not None else None
        if _driver.open_step(self, tokens, samples):
            self.step_tokens = self.step_samples = None

    def count_batch(self, batch):
        """A batch of the open step: its tokens and samples added to the step's (when counted per batch)."""
        if self.idle:
            return
        if self._timing and threading.get_ident() == self.owner:  # another thread's call: not this step's
            return self._timed(CallbackSteps.count_batch, batch)
        if self._tokens_of is None or threading.get_ident() != self.owner or not _driver.holds(self):
            return
        self._add_counts(batch)

    def _add_counts(self, batch):
        """count_batch's work, its checks made: the batch's tokens and samples added to the step's."""
        if self._tokens_of is batch_tokens and self._samples_of is batch_samples:
            t, s = _auto_counts(batch)  # both from one look at the batch (each Python call costs ~1 us here)
        else:
            t = self._count(self._tokens_of(batch), "tokens")
            s = self._count(self._samples_of(batch), "samples") if t is not None and self._samples_of is not None else None
        if t is None:
            return
        self.step_tokens = (self.step_tokens or 0.0) + t
        if s is not None:
            self.step_samples = (self.step_samples or 0.0) + s
        _steptrace.set_step_tokens(self.step_tokens, self.step_samples)

    def _count(self, v, what):
        """A count from a batch as a float; a tensor on a GPU is refused (reading it would wait for the
        GPU at every batch), said once; so is a value that is not a finite number >= 0."""
        if v is None:
            return None
        if type(v) is float or type(v) is int:  # what batch_tokens gives, and most count functions
            f = float(v)
            if f >= 0 and f != float("inf"):
                return f
        if getattr(v, "is_cuda", False):
            _steptrace.warn_once(self.who + "." + what + ".cuda", f"{self.who}: the {what} function returned a CUDA "
                                 "tensor (reading it waits for the GPU every batch): return a Python number; ignored")
            return None
        try:
            f = float(v)
        except (TypeError, ValueError):
            f = float("nan")
        if not math.isfinite(f) or f < 0:
            _steptrace.warn_once(self.who + "." + what + ".bad", f"{self.who}: {what} of a batch is {v!r}, not a "
                                 "finite number >= 0; ignored")
            return None
        return f

    def _wake(self):
        """Idle: whether steptrace runs now (started after training began); then no longer idle."""
        if _steptrace.is_running():
            self.idle = False
        return not self.idle

    def begin_batch(self, batch, name):
        """A framework batch begins: open_step(), count_batch(batch) and enter(name) as one call (Lightning's
        on_train_batch_start): between a framework's work each Python call costs ~1 us, ten times what it
        does in a warm loop (benchmarks/framework_budget.py --probe)."""
        if self.idle and not self._wake():
            return
        if self._timing:
            if not self._calls and steptrace._pending:
                steptrace._resolve_pending()  # outside the time, as open_step's
            self._timed(CallbackSteps.begin_batch, batch, name)
            self._entered += self.phase is not None
            return
        # open_step(), count_batch(batch) and enter(name), their checks made once (fewer Python calls: a
        # Lightning step of 2 micro-batches made 10 a batch here, now 5, besides the step's closing).
        tokens = self.tokens if isinstance(self.tokens, float) else None
        samples = self.samples if isinstance(self.samples, float) and tokens is not None else None
        if _driver.open_step(self, tokens, samples):
            self.step_tokens = self.step_samples = None
        if self._tokens_of is not None and _driver.state.holder is self and threading.get_ident() == self.owner:
            self._add_counts(batch)
        self.enter(name)

    def enter(self, name):
        """`name` becomes the open phase (the one open before is closed): one extension call, or two for a
        step kept past its training work (the phase opens none and ends that step: steptrace.phase's rule)."""
        if self.idle:
            return
        if self._timing:
            self._timed(CallbackSteps.enter, name)
            self._entered += self.phase is not None  # a phase scope the model charges
            return
        d = _driver.state
        if d.holder is not self:  # no step of these callbacks: no phase either
            if self.phase is not None:
                self.exit()
            return
        pid = self._phase_ids.get(name)
        if pid is None:
            pid = self._phase_ids[name] = steptrace.phase(name)._id
        if self.phase is not None and not d.ending:
            self.phase = pid
            _steptrace.phase_switch(pid)  # a stopped runtime's scopes are empty: pushed and popped all the same
            return
        if self.phase is not None:
            self.exit()
        if d.ending:
            steptrace.phase(name).__enter__()  # ends the kept step first (its closing() closed the phase)
        else:
            _steptrace.phase_enter(pid)
        self.phase = pid

    def exit(self):
        if self.idle:
            return
        if self._timing:
            return self._timed(CallbackSteps.exit)
        if self.phase is not None:
            self.phase = None
            _steptrace.phase_exit()

    def close_step(self):
        """The framework's step ended: its phase closes; the step stays open until the next one begins
        or work that is no step's does (steptrace._driver)."""
        if self.idle:
            return
        if self._timing:
            self._timed(CallbackSteps._end_step)
            self._timed_step_ends(True)
        else:
            self._end_step()
        self._time_next_step()

    def _end_step(self):
        self.exit()
        _driver.work_done(self)  # the cross-rank view compares ranks up to here

    def close_if_ending(self):
        """Work that is no step's begins: the step kept open for the next one ends here; one still before its
        optimizer step (inside its accumulation window) is left open, not split in two."""
        if self.idle:
            return
        if _driver.holds(self) and _driver.ending():
            self._timed_step_ends(False)  # a step timed from here would hold the close's markers: none
            _driver.close_step()

    def close_now(self):
        """Ends the open step at once (validation, a checkpoint, the end of training begin)."""
        if self.idle:
            return
        self._timed_step_ends(False)
        self.exit()
        if _driver.holds(self):
            _driver.close_step()


# One framework step in TIME_EVERY, from the TIME_FROM-th on (the start-up steps' one-off costs left out),
# has its bookkeeping timed; the median of the last TIME_SAMPLES timed steps is what the runtime charges.
# A prime: a timed step whose calls meet a boundary that switches tracing gives no sample (the lines
# charge that as tracing), and a fixed trace_every=32 would have put every timed step on one.
TIME_EVERY = 37
TIME_FROM = 64
TIME_SAMPLES = 9
TIME_SAMPLES_FIRST = 5  # the median of fewer would be one preempted step away from wrong


def _measure_clock_ns():
    """What one time.perf_counter_ns() costs here: the median of back-to-back pairs (taken out of each
    timed call, which reads the clock twice)."""
    pairs = []
    for _ in range(101):  # read as a timed call reads it
        t0 = time.perf_counter_ns()
        pairs.append(time.perf_counter_ns() - t0)
    pairs.sort()
    return pairs[50]


_clock_ns = None


def clock_ns():
    global _clock_ns
    if _clock_ns is None:
        _clock_ns = _measure_clock_ns()
    return _clock_ns


def _is_auto(v):
    return isinstance(v, str) and v == "auto"


def _check_number(who, what, v):
    """A number per step (numpy's too) as a float; anything else raises here, not in a training hook."""
    ok = isinstance(v, numbers.Real) and not isinstance(v, bool)
    f = float(v) if ok else float("nan")
    if not math.isfinite(f) or f < 0:
        raise ValueError(f"{who}({what}={v!r}): a finite number >= 0, a function of the batch, or 'auto' is wanted")
    return f
