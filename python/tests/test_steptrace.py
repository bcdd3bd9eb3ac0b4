"""CPU tests of the Python package (no GPU, no torch needed): run with pytest, or directly
(`python tests/test_steptrace.py`: every test_* function, each in a fresh log directory)."""
import importlib
import json
import os
import sys
import tempfile
import time
import tracemalloc

import steptrace
from runner import run_tests


def lines_of(path):
    steps, events = [], []
    for raw in open(path):
        obj = json.loads(raw)
        (events if "event" in obj else steps).append(obj)
    return steps, events


def fresh(name):
    d = tempfile.mkdtemp(prefix="steptrace-py-")
    return os.path.join(d, name + ".jsonl")


def test_import_without_torch():
    assert "torch" not in sys.modules or os.environ.get("STEPTRACE_TEST_TORCH"), "importing steptrace imported torch"
    assert "log_path" in steptrace.settings and steptrace.settings["log_path"]["variable"] == "STEPTRACE_LOG"
    if "torch" not in sys.modules:
        try:
            import torch  # noqa: F401
        except ImportError:
            assert steptrace.use_torch_memory() is False


def test_steps_phases_scalars():
    log = fresh("steps")
    assert steptrace.start(log_path=log, summary=False, tokens_per_step=512, gpu="off")
    for i in range(6):
        with steptrace.step():
            with steptrace.phase("forward"):
                time.sleep(0.002)
                with steptrace.phase("attention"):
                    time.sleep(0.001)
            steptrace.record("loss", 2.0 - 0.1 * i)
            steptrace.record("lr", 3e-4)
    s = steptrace.stop()
    assert s["started"] and s["steps"] == 6 and s["lines_written"] == 6, s
    assert s["log_path"] == log
    assert "forward" in s["phases"] and s["phases"]["forward"]["host_ms_mean"] >= 2.0
    steps, events = lines_of(log)
    assert [l["global_step"] for l in steps] == list(range(6))
    assert steps[3]["phases"]["forward"]["host_ms"] >= 3.0
    assert steps[3]["phases"]["attention"]["host_ms"] >= 1.0
    assert abs(steps[3]["loss"] - 1.7) < 1e-9 and steps[3]["scalars"]["lr"] == 3e-4
    assert steps[3]["tokens"] == 512
    assert events[-1]["event"] == "end"


def test_decorators_and_tokens_per_step():
    log = fresh("decorators")
    steptrace.start(log_path=log, summary=False, gpu="off")

    @steptrace.phase("optimizer")
    def update():
        time.sleep(0.001)

    @steptrace.step(tokens=100, samples=4)
    def train_step():
        update()

    for _ in range(3):
        train_step()
    steptrace.stop()
    steps, _ = lines_of(log)
    assert len(steps) == 3
    assert steps[0]["tokens"] == 100 and steps[0]["samples"] == 4
    assert steps[0]["phases"]["optimizer"]["host_ms"] >= 1.0


def test_nulls_have_reasons():
    log = fresh("nulls")
    steptrace.start(log_path=log, summary=False, gpu="off")
    with steptrace.step():
        pass
    steptrace.stop()
    steps, _ = lines_of(log)
    line = steps[0]
    for field in ("gpu_utilization", "estimated_mfu", "tokens_per_second", "sm_activity"):
        assert line[field] is None and line["null_reasons"][field], field
    assert "gpu=off" in line["null_reasons"]["gpu_utilization"] or "off" in line["null_reasons"]["gpu_utilization"]


def test_bad_arguments_raise_clear_errors():
    cases = [
        (lambda: steptrace.start(bogus=1), TypeError, "unknown setting 'bogus'"),
        (lambda: steptrace.start(trace_every=-3), ValueError, "trace_every"),
        (lambda: steptrace.start(dtype="fp64"), ValueError, "dtype"),
        (lambda: steptrace.start(log_path=3.5j), TypeError, "log_path"),
        (lambda: steptrace.start(model_parallel=4), TypeError, "model_parallel"),
        (lambda: steptrace.start(model_parallel={"tensor": 0}), ValueError, "model_parallel.tensor"),
        (lambda: steptrace.start(capture_steps="5-3"), ValueError, "capture_steps"),
        (lambda: steptrace.phase("Bad Name"), ValueError, "phase name"),
        (lambda: steptrace.phase(3), TypeError, "str"),
        (lambda: steptrace.step(tokens=-1), ValueError, "tokens"),
        (lambda: steptrace.step(tokens="many"), TypeError, "tokens"),
        (lambda: steptrace.record("x", "1.0"), TypeError, "number"),
        (lambda: steptrace.record("x", 10 ** 400), ValueError, "too large"),
    ]
    for fn, exc, text in cases:
        try:
            fn()
        except exc as e:
            assert text in str(e), (text, str(e))
        else:
            raise AssertionError(f"no {exc.__name__} for {text}")
    assert not steptrace.is_running()


def test_environment_wins():
    log = fresh("env")
    os.environ["STEPTRACE_LOG_EVERY"] = "2"
    try:
        steptrace.start(log_path=log, summary=False, gpu="off", log_every=1)
        for _ in range(4):
            with steptrace.step():
                pass
        steptrace.stop()
    finally:
        del os.environ["STEPTRACE_LOG_EVERY"]
    steps, _ = lines_of(log)
    assert len(steps) == 2 and all(l["window"]["steps"] == 2 for l in steps), [l.get("window") for l in steps]


def test_the_default_log_is_compact_and_reads_back_whole():
    """A run with no line_detail (the environment's cleared: CTest asks for the full line) writes a run
    record and compact lines (steptrace.step/2); steptrace.lines gives each its run's fields and its
    reasons' sentences back; the report reads it."""
    import subprocess
    log = fresh("compact")
    code = ("import steptrace\nsteptrace.start(log_path=%r, summary=False, gpu='off', tokens_per_step=64)\n"
            "for i in range(4):\n    with steptrace.step():\n        with steptrace.phase('forward'): pass\n"
            "        steptrace.record('loss', 1.0 / (i + 1))\nsteptrace.stop()") % log
    env = {k: v for k, v in os.environ.items() if not k.startswith("STEPTRACE_")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    from steptrace import lines as reader
    records = reader.read_records(log)
    assert records[0]["event"] == "run" and records[0]["settings"]["line_detail"] == "compact", records[0]
    raw = [x for x in records if "event" not in x]
    assert len(raw) == 4 and all(x["schema"] == "steptrace.step/2" for x in raw)
    assert all(len(json.dumps(x)) < 1536 for x in raw[1:])
    steps = reader.step_lines(log)
    assert [x["loss"] for x in steps] == [1.0, 0.5, round(1 / 3, 6), 0.25], [x["loss"] for x in steps]
    for x in steps:
        assert x["hostname"] == records[0]["hostname"] and x["tokens"] == 64
        assert "gpu=off" in x["null_reasons"]["gpu_utilization"], x["null_reasons"]
        assert x["phases"]["forward"]["count"] == 1
    page = os.path.join(os.path.dirname(log), "r.html")
    r = subprocess.run([sys.executable, "-m", "steptrace", "report", log, "-o", page], capture_output=True, text=True)
    assert r.returncode == 0 and "skipped" not in r.stdout, (r.stdout, r.stderr)


def test_framework_callbacks_are_optional_and_their_steps_add_up():
    """`import steptrace` imports neither Lightning nor transformers; steptrace.lightning and
    steptrace.transformers say what they need where it is missing. The callbacks' shared bookkeeping
    (steptrace._callback_steps), driven in Lightning's hook order with gradient accumulation (2 batches a
    step): one step per optimizer step, its phases, its batches' tokens, steptrace started and stopped
    by it. (The callbacks against the real Lightning and transformers: python/tests/test_callbacks_gpu.py
    on the device.)"""
    import subprocess
    r = subprocess.run([sys.executable, "-c", "import sys, steptrace; "
                        "print([m for m in ('lightning', 'pytorch_lightning', 'transformers') if m in sys.modules])"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr)
    import importlib.util
    for module, package in (("steptrace.lightning", ("lightning", "pytorch_lightning")),
                            ("steptrace.transformers", ("transformers",))):
        if any(importlib.util.find_spec(p) for p in package):
            continue  # the package is here: nothing to say
        try:
            importlib.import_module(module)
        except ImportError as e:
            assert "needs" in str(e) and package[-1].split("_")[-1] in str(e).lower(), str(e)
        else:
            raise AssertionError(f"{module} imported without {package}")

    from steptrace._callback_steps import CallbackSteps
    # Numbers per step are checked when the callback is made, not in a training hook; numpy's are numbers.
    try:
        import numpy
        assert CallbackSteps(numpy.int64(4096), None, {}, "test").tokens == 4096.0
    except ImportError:
        pass
    for bad in (float("inf"), -1, True, "many"):
        try:
            CallbackSteps(bad, None, {}, "test")
        except ValueError:
            pass
        else:
            raise AssertionError(f"tokens={bad!r} accepted")

    class Ids:
        shape = (4, 128)

        def numel(self):
            return 512

    # The batch's start as three calls, and as Lightning's callback makes it (begin_batch: one call); the
    # forward -> backward change is one extension call (phase_switch): each phase still closes where the
    # next opens, and a step's phases are counted as before.
    for together in (False, True):
        log = fresh("callback_steps")
        steps = CallbackSteps("auto", "auto", {"log_path": log, "summary": False, "gpu": "off", "line_detail": "full"}, "test")
        steps.begin_training()
        assert steptrace.is_running() and steps.started
        for _ in range(3):                       # optimizer steps
            for micro in range(2):               # on_train_batch_start .. on_train_batch_end
                if together:
                    steps.begin_batch({"input_ids": Ids()}, "forward")
                else:
                    steps.open_step()
                    steps.count_batch({"input_ids": Ids()})
                    steps.enter("forward")
                steps.enter("backward")          # on_before_backward
                steps.exit()                     # on_after_backward
                if micro == 1:
                    steps.enter("optimizer")     # on_before_optimizer_step
                    steps.exit()
                    steps.close_step()           # on_train_batch_end after the optimizer step
        # A phase entered on the step kept past its training work (no batch began) ends that step
        # first, as a phase the program opens between steps does; it is no step's.
        assert steps.open
        steps.enter("optimizer")
        assert not steps.open and steps.phase is not None
        steps.exit()
        steps.end_training()
        assert not steptrace.is_running()
        lines, events = lines_of(log)
        assert len(lines) == 3, (together, len(lines))
        for l in lines:
            counts = {k: v["count"] for k, v in l["phases"].items()}
            assert counts == {"forward": 2, "backward": 2, "optimizer": 1}, (together, counts)
            assert l["tokens"] == 1024 and l["samples"] == 8, (together, l["tokens"], l["samples"])
            # The phases do not overlap: forward, backward and optimizer add up to at most the step.
            host = sum(v["host_ms"] for v in l["phases"].values())
            assert host <= l["step_time_ms"] * 1.001 + 1e-3, (together, host, l["step_time_ms"])
        assert any(e.get("event") == "end" for e in events)


def test_framework_callbacks_time_their_own_bookkeeping():
    """The callbacks time their bookkeeping on one framework step in TIME_EVERY (from TIME_FROM) and, from
    TIME_SAMPLES_FIRST samples on, tell the runtime the median of what it costs per step beyond what the
    model charges for their calls (the lines' host_api part adds it): a tokens function that spins 300 us
    a batch (2 batches a step) shows as ~600 us a step; without it, a few us on an idle machine and
    under the slow case's bound on any. Only the steps due are timed; a timed step's callbacks pickle; a
    validation that ends the kept step leaves that step without a sample; waiting for values recorded
    from CUDA tensors (3 ms here, recorded before and inside each timed step) is not in its time;
    start() and begin_training/end_training set the value back to 0, a start() refused does not. The slow
    case starts its batches as Lightning's callback does (begin_batch), the plain one in three calls."""
    import pickle
    import statistics

    from steptrace import _steptrace
    from steptrace._callback_steps import CallbackSteps, TIME_EVERY, TIME_FROM, TIME_SAMPLES_FIRST

    class Ids:
        shape = (4, 128)

        def numel(self):
            return 512

    class Ready:  # a recorded CUDA value's copy event, as the step's close waits for it (3 ms of GPU)
        def synchronize(self):
            spin(3000)

    def spin(us):
        end = time.perf_counter() + us * 1e-6
        while time.perf_counter() < end:
            pass

    def slow_tokens(batch):
        spin(300)
        return 512.0

    # start() sets it back to 0; a start() refused (already running) leaves it.
    _steptrace.set_step_extra_ns(12345.0)
    steptrace.start(log_path=fresh("callback_timing_start"), summary=False, gpu="off")
    assert _steptrace.step_extra_ns() == 0
    _steptrace.set_step_extra_ns(777.0)
    assert not steptrace.start(log_path=fresh("callback_timing_start"), summary=False, gpu="off")
    assert _steptrace.step_extra_ns() == 777.0
    steptrace.stop()
    first = -(-TIME_FROM // TIME_EVERY) * TIME_EVERY  # timed: first, then every TIME_EVERY steps
    due = [first + k * TIME_EVERY for k in range(TIME_SAMPLES_FIRST + 2)]
    validation = due[2]  # a timed step that gives no sample
    # (The runtime takes at most 1 ms: the slow case's bound is its low one. The plain case's few us read
    # 50-220 us on a loaded 2-core machine, the thread preempted inside timed calls: its bound is the slow
    # case's low one, which a 3 ms wait inside the time, read as the runtime's 1 ms, would cross.)
    for tokens, low, high in ((slow_tokens, 500_000, 1_000_001), ("auto", 0, 500_000)):
        steps = CallbackSteps(tokens, None, {"log_path": fresh("callback_timing"), "summary": False, "gpu": "off"}, "test")
        _steptrace.set_step_extra_ns(4242.0)  # an earlier training's, which raised
        steps.begin_training()
        try:
            assert _steptrace.step_extra_ns() == 0
            timed = []
            for step in range(due[-1] + 1):
                timed.append(steps._timed_step)
                if timed[-1] and step == due[1] and tokens == "auto":
                    copy = pickle.loads(pickle.dumps(steps))  # Lightning's ddp_spawn pickles its callbacks
                    assert copy._timed_step and copy._samples == steps._samples
                if step == validation:
                    steps.close_if_ending()  # validation before the timed step: the kept step ends, no sample
                for micro in range(2):
                    if tokens == "auto":  # the three calls (the HF Trainer's order, its count from a hook)
                        steps.open_step()
                        if step in due and micro == 0:
                            steptrace._pending.append(("loss", 1.0, Ready()))  # recorded inside a timed step
                        steps.count_batch({"input_ids": Ids()})
                        steps.enter("forward")
                    else:  # Lightning's one call
                        steps.begin_batch({"input_ids": Ids()}, "forward")
                    steps.enter("backward")
                    steps.exit()
                    if micro == 1:
                        steps.enter("optimizer")
                        steps.exit()
                        steps.close_step()
                if step + 1 in due:  # waited for as the timed step opens (open_step's or begin_batch's)
                    steptrace._pending.append(("loss", 1.0, Ready()))
            samples = list(steps._samples)
            extra = _steptrace.step_extra_ns()
            assert [i for i, t in enumerate(timed) if t] == due, timed
            assert len(samples) == len(due) - 1, samples  # the validation's: none
            # In the plain case every timed step met 3 ms waits for CUDA values: not the bookkeeping's.
            assert low <= extra < high, (tokens, extra, samples)
            # The runtime takes at most 1 ms; the samples themselves would hold the 3 ms waits if either
            # way into a timed step counted them.
            assert statistics.median(samples) < 2_000_000, (tokens, samples)
        finally:
            steps.end_training()
        assert _steptrace.step_extra_ns() == 0  # forgotten with the training


def test_framework_batch_counts_in_one_look():
    """tokens='auto' and samples='auto' read a batch once (begin_batch's one call, Lightning's) and count
    what the two functions count apart: a dict's input_ids (numel, first dimension), nothing from a
    batch without them, nothing from a tensor alone (no tokens: the step's counts take nothing)."""
    from steptrace._callback_steps import _auto_counts, batch_samples, batch_tokens

    class Ids:
        def __init__(self, shape):
            self.shape = shape

        def numel(self):
            n = 1
            for d in self.shape:
                n *= d
            return n

    class Mapping:  # a BatchEncoding-like object: keys() and [] but no dict
        def __init__(self, d):
            self.d = d

        def keys(self):
            return self.d.keys()

        def __getitem__(self, k):
            return self.d[k]

    batches = [{"input_ids": Ids((4, 64))}, Mapping({"input_ids": Ids((2, 8))}), {"input_ids": Ids(())},
               {"labels": Ids((4, 64))}, Ids((4, 64)), [Ids((4, 64))], {"input_ids": [1, 2, 3]}, None]
    for b in batches:
        t = batch_tokens(b)
        want = (t, batch_samples(b) if t is not None else None)
        assert _auto_counts(b) == want, (b, _auto_counts(b), want)
    assert _auto_counts(batches[0]) == (256.0, 4.0)
    assert _auto_counts(batches[2]) == (1.0, None)


def test_framework_callbacks_idle_while_steptrace_is_off():
    """steptrace not running as training begins (enabled=false here; STEPTRACE_ENABLED=0, a failed
    start()): the callbacks' calls return at once, but a step's first asks whether steptrace runs now - a
    program that starts it later gets its steps from there, a framework's (their lines claim no upper end
    for the cost). Each Python call between a framework's work costs ~1 us (framework_budget.py --probe);
    Lightning's callback with steptrace disabled cost ~0.9 % of a 4.5 ms step on an H200 (session 69)."""
    from steptrace._callback_steps import CallbackSteps
    from steptrace import _steptrace

    class Ids:
        shape = (4, 64)

        def numel(self):
            return 256

    batch = {"input_ids": Ids()}

    def off_at_training_begin(name):
        steps = CallbackSteps("auto", None, {"log_path": fresh(name), "summary": False, "enabled": False}, "test")
        steps.begin_training()
        assert not steptrace.is_running() and steps.idle
        return steps

    def lightning_step(steps):  # Lightning's hook order (steptrace.lightning.StepTrace), 2 micro-batches
        for micro in range(2):
            steps.begin_batch(batch, "forward")  # on_train_batch_start
            steps.enter("backward")              # on_before_backward
            steps.exit()                         # on_after_backward
            if micro == 1:
                steps.enter("optimizer")         # on_before_optimizer_step
            steps.exit()                         # on_train_batch_end
            if micro == 1:
                steps.close_step()

    steps = off_at_training_begin("callbacks_idle_off")
    package = os.path.dirname(os.path.abspath(steptrace.__file__))
    python_calls, c_calls = [], []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(package):
            python_calls.append(frame.f_code.co_name)
        elif event == "c_call" and arg is not sys.setprofile:
            c_calls.append(getattr(arg, "__name__", "?"))
    sys.setprofile(profile)
    try:
        for _ in range(5):
            lightning_step(steps)
    finally:
        sys.setprofile(None)
    # Per step: the hooks' 10 calls into CallbackSteps, two asking whether steptrace runs (the batches'
    # starts), and those two questions to the extension; before, 24 Python and 8 built-in or extension
    # calls (each phase change, batch count and step end reached the step driver).
    assert len(python_calls) == 5 * 12, (len(python_calls) / 5, python_calls[:24])
    assert c_calls == ["is_running"] * 10, c_calls
    steps.end_training()
    assert not steps.idle
    # A later start: the next batch's start opens a step, a framework's; on full lines (their phases'
    # counts) and on the defaults (compact lines, read back whole: the environment's forced detail lifted).
    real = _steptrace.step_enter
    for detail in ("full", None):
        steps = off_at_training_begin(f"callbacks_idle_off_{detail or 'default'}")
        log = fresh(f"callbacks_idle_started_later_{detail or 'default'}")
        saved = os.environ.pop("STEPTRACE_LINE_DETAIL", None) if detail is None else None
        try:
            assert steptrace.start(log_path=log, summary=False, gpu="off", **({"line_detail": detail} if detail else {}))
        finally:
            if saved is not None:
                os.environ["STEPTRACE_LINE_DETAIL"] = saved
        framework = []

        def step_enter(tokens, samples, fw=False):
            framework.append(fw)
            return real(tokens, samples, fw)
        _steptrace.step_enter = step_enter
        try:
            for _ in range(3):
                lightning_step(steps)
            assert not steps.idle
            with steptrace.step():  # the program's own step: not a framework's
                pass
        finally:
            _steptrace.step_enter = real
        assert framework == [True] * 3 + [False], framework
        steps.end_training()  # did not start it: stops nothing
        assert steptrace.is_running() and not steps.idle
        steptrace.stop()
        from steptrace import lines as reader
        records = reader.read_records(log)
        if detail is None:  # the defaults: a run record, then compact lines
            assert records[0].get("event") == "run" and records[0]["settings"]["line_detail"] == "compact", records[0]
        assert {r["schema"] for r in records if "event" not in r} == {"steptrace.step/1" if detail else "steptrace.step/2"}
        lines = reader.step_lines(log)
        assert len(lines) == 4, len(lines)
        assert all(l["phases"]["backward"]["count"] == 2 for l in lines[:3]), [l["phases"] for l in lines]
    assert not steptrace.is_running()


def test_loader_makes_steps_with_input_phase():
    log = fresh("loader")
    steptrace.start(log_path=log, summary=False, gpu="off")

    def slow_batches():
        for i in range(5):
            time.sleep(0.003)
            yield list(range(i + 1))

    seen = []
    for batch in steptrace.loader(slow_batches(), tokens=len):
        with steptrace.phase("forward"):
            time.sleep(0.001)
        seen.append(len(batch))
    try:
        for _ in steptrace.loader([1]):
            with steptrace.step():
                pass
    except RuntimeError as e:
        assert "loader" in str(e)
    else:
        raise AssertionError("step() inside loader() did not raise")
    steptrace.stop()
    steps, _ = lines_of(log)
    assert seen == [1, 2, 3, 4, 5]
    loop = steps[:5]
    assert all(l["phases"]["input"]["host_ms"] >= 3.0 for l in loop), [l["phases"]["input"] for l in loop]
    assert [l["tokens"] for l in loop] == [1, 2, 3, 4, 5]
    assert all(l["dataloader_wait_ms"] >= 3.0 for l in loop)
    # The wait that found the loader exhausted: a step that processed nothing.
    assert steps[5]["tokens"] == 0 and steps[5]["tokens_per_second"] == 0, steps[5]


def test_exhaustion_step_has_no_tokens_and_summary_is_tokens_over_time():
    log = fresh("loader_tokens")
    steptrace.start(log_path=log, summary=False, gpu="off")
    for epoch in range(2):
        for _ in steptrace.loader(range(4), tokens=4096, samples=8):
            time.sleep(0.002)
    summary = steptrace.stop()
    steps, _ = lines_of(log)
    assert len(steps) == 10, len(steps)
    ends = [steps[4], steps[9]]  # each epoch's exhaustion step
    assert all(l["tokens"] == 0 and l["samples"] == 0 for l in ends), ends
    assert all(l["tokens"] == 4096 for i, l in enumerate(steps) if i not in (4, 9))
    rated = [l for l in steps if l["tokens_per_second"] is not None]
    expected = sum(l["tokens"] for l in rated) / sum(l["step_time_ms"] / 1000 for l in rated)
    assert abs(summary["tokens_per_second_mean"] - expected) <= 1e-3 * expected, (summary["tokens_per_second_mean"], expected)


def test_fork_child_finds_steptrace_off_and_can_start_anew():
    log, child_log = fresh("fork_parent"), fresh("fork_child")
    steptrace.start(log_path=log, summary=False, gpu="off")
    for i in range(3):
        with steptrace.step(tokens=8):
            with steptrace.phase("forward"):
                if i == 1:
                    pid = os.fork()
                    if pid == 0:  # the child: steptrace off, every call a no-op, then a run of its own
                        code = 1
                        try:
                            if not steptrace.is_running():
                                with steptrace.step():
                                    with steptrace.phase("child_phase"):
                                        steptrace.record("x", 1.0)
                                steptrace.stop()
                                steptrace.start(log_path=child_log, summary=False, gpu="off")
                                for _ in range(2):
                                    with steptrace.step():
                                        with steptrace.phase("child_phase"):
                                            pass
                                code = 0 if steptrace.stop()["lines_written"] == 2 else 2
                        finally:
                            os._exit(code)
    steptrace.stop()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    steps, _ = lines_of(log)
    assert [l["global_step"] for l in steps] == [0, 1, 2]
    assert all("child_phase" not in l["phases"] for l in steps)
    child_steps, _ = lines_of(child_log)
    assert len(child_steps) == 2 and all("child_phase" in l["phases"] for l in child_steps)


def test_capture_steps_writes_a_trace_without_gpu():
    log = fresh("capture")
    steptrace.start(log_path=log, summary=False, gpu="off")
    for i in range(4):
        with steptrace.step():
            if i == 0:
                assert steptrace.capture_steps(1)
            with steptrace.phase("forward"):
                time.sleep(0.001)
    steptrace.stop()
    steps, _ = lines_of(log)
    trace = steps[1]["trace"]
    assert trace and trace["reasons"] == ["capture_steps"], trace
    doc = json.load(open(trace["file"]))
    assert any(e.get("name") == "forward" and e.get("ph") == "X" for e in doc["traceEvents"])


def test_phase_scope_allocates_nothing_and_its_cost():
    log = fresh("cost")
    steptrace.start(log_path=log, summary=False, gpu="off", max_spans_per_step=1 << 20)
    fwd = steptrace.phase("forward")
    with steptrace.step():
        for _ in range(1000):  # warm: the C++ span vector grows, caches fill
            with steptrace.phase("forward"):
                pass
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for _ in range(20000):
            with steptrace.phase("forward"):
                pass
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        grown = sum(s.size_diff for s in after.compare_to(before, "filename") if s.size_diff > 0)
        n = 200000
        t = time.perf_counter_ns()
        for _ in range(n):
            with fwd:
                pass
        per_scope = (time.perf_counter_ns() - t) / n
    steptrace.stop()
    # tracemalloc's own snapshot bookkeeping is a few kB; 20 000 scopes allocating would be far more.
    assert grown < 16384, f"{grown} bytes of Python objects grew over 20 000 scopes"
    print(f"python phase scope: {per_scope:.0f} ns per enter+exit (cached object)")


def test_numpy_like_numbers_and_record_when_off():
    class Index:  # an integer type that is not int (numpy.int64 behaves so)
        def __index__(self):
            return 2

    class Real:  # a real number type that is not float (numpy.float64 behaves so)
        def __float__(self):
            return 0.25

    log = fresh("numbers")
    assert steptrace.start(log_path=log, summary=False, gpu="off", log_every=Index(), overhead_budget=Real())
    for _ in range(2):
        with steptrace.step():
            pass
    steptrace.stop()
    steptrace.record("loss", 1.0)  # not running: nothing happens, nothing raises
    steps, _ = lines_of(log)
    assert len(steps) == 1 and steps[0]["window"]["steps"] == 2
    # Any numbers.Real is a value: a Fraction here, NumPy's scalars where NumPy is installed.
    import fractions
    log = fresh("reals")
    assert steptrace.start(log_path=log, summary=False, gpu="off")
    with steptrace.step():
        steptrace.record("ratio", fractions.Fraction(1, 4))
        try:
            import numpy
        except ImportError:
            numpy = None
        if numpy is not None:
            steptrace.record("f32", numpy.float32(0.5))
            steptrace.record("i64", numpy.int64(3))
    steptrace.stop()
    steps, _ = lines_of(log)
    assert steps[0]["scalars"]["ratio"] == 0.25, steps[0]["scalars"]
    if numpy is not None:
        assert steps[0]["scalars"]["f32"] == 0.5 and steps[0]["scalars"]["i64"] == 3, steps[0]["scalars"]


def host_run(log, steps):
    """A short host-only run into `log`: `steps` steps, each with a forward phase."""
    steptrace.start(log_path=log, summary=False, gpu="off")
    for _ in range(steps):
        with steptrace.step():
            with steptrace.phase("forward"):
                pass
    steptrace.stop()


def test_empty_log_in_the_report():
    import subprocess
    d = tempfile.mkdtemp(prefix="steptrace-report-")
    full, empty = os.path.join(d, "steps-0.jsonl"), os.path.join(d, "steps-1.jsonl")
    host_run(full, 3)
    open(empty, "w").close()
    report = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "scripts", "steptrace_report.py")
    r = subprocess.run([sys.executable, report, full, empty, "-o", os.path.join(d, "r.html")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_report_installed_with_the_package():
    """`python -m steptrace report` and (pip installs) the `steptrace-report` command."""
    import subprocess
    d = tempfile.mkdtemp(prefix="steptrace-report-")
    log, page = os.path.join(d, "steps-0.jsonl"), os.path.join(d, "r.html")
    host_run(log, 4)
    cwd = tempfile.mkdtemp(prefix="steptrace-cwd-")  # not the source tree: the installed modules answer
    r = subprocess.run([sys.executable, "-m", "steptrace", "--help"], capture_output=True, text=True, cwd=cwd)
    assert r.returncode == 0 and "report" in r.stdout, (r.returncode, r.stdout, r.stderr)
    r = subprocess.run([sys.executable, "-m", "steptrace", "report", log, "-o", page, "--title", "pkg"],
                       capture_output=True, text=True, cwd=cwd)
    assert r.returncode == 0, r.stderr
    text = open(page).read()
    assert text.lstrip().lower().startswith("<!doctype html") and "pkg" in text
    r = subprocess.run([sys.executable, "-m", "steptrace", "nonsense"], capture_output=True, text=True, cwd=cwd)
    assert r.returncode == 2 and "unknown command" in r.stderr
    if os.environ.get("PYCHECK_INSTALLED") == "pip":  # tests/checks/python_check.sh says how it installed
        exe = os.path.join(os.path.dirname(sys.executable), "steptrace-report")
        r = subprocess.run([exe, "--help"], capture_output=True, text=True, cwd=cwd)
        assert r.returncode == 0 and "--output" in r.stdout, (r.returncode, r.stderr)


def test_ctl_asks_a_running_python_loop():
    """`python -m steptrace ctl capture` (and, pip-installed, `steptrace-ctl`) against a loop running in this
    interpreter: the request is read, the next two steps are captured and merged into one timeline."""
    import subprocess
    d = tempfile.mkdtemp(prefix="steptrace-ctl-")
    merged = os.path.join(d, "merged.json")
    steptrace.start(log_path=os.path.join(d, "steps.jsonl"), summary=False, gpu="off", trace_trigger=0)
    cwd = tempfile.mkdtemp(prefix="steptrace-cwd-")
    ctl = subprocess.Popen([sys.executable, "-m", "steptrace", "ctl", "capture", "--dir", d, "--steps", "2",
                            "--wait", "60", "-o", merged], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, cwd=cwd)
    deadline = time.time() + 90
    while ctl.poll() is None and time.time() < deadline:
        with steptrace.step():
            with steptrace.phase("forward"):
                time.sleep(0.002)
    steptrace.stop()
    out = ctl.communicate(timeout=30)[0]
    assert ctl.returncode == 0, out
    assert "not aligned" in out, out  # one process, no exchange: its own next two steps
    doc = json.load(open(merged))
    assert doc["otherData"]["ranks"] == 1 and len(doc["otherData"]["per_rank"][0]["steps"]) == 2, doc["otherData"]
    assert any(e.get("cat") == "phase" and e.get("name") == "forward" for e in doc["traceEvents"])
    if os.environ.get("PYCHECK_INSTALLED") == "pip":
        exe = os.path.join(os.path.dirname(sys.executable), "steptrace-ctl")
        r = subprocess.run([exe, "capture", "--help"], capture_output=True, text=True, cwd=cwd)
        assert r.returncode == 0 and "--steps" in r.stdout, (r.returncode, r.stderr)


def test_near_misses_are_named():
    try:
        steptrace.start(log_pth="x.jsonl")
    except TypeError as e:
        assert "unknown setting 'log_pth'; did you mean 'log_path'?" in str(e), str(e)
    else:
        raise AssertionError("start(log_pth=...) was accepted")
    # phase('forwrd') is a custom phase (a valid name), said once on the steptrace logger (stderr).
    code = ("import steptrace; steptrace.start(log_path=%r, summary=False, gpu='off')\n"
            "for _ in range(2):\n    with steptrace.step():\n        with steptrace.phase('forwrd'): pass\n"
            "steptrace.stop()") % fresh("spelling")
    import subprocess
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("is a custom phase, not the built-in 'forward'") == 1, r.stderr


def test_a_step_never_exited_does_not_swallow_the_later_ones():
    log = fresh("never_exited")
    assert steptrace.start(log_path=log, summary=False, gpu="off")
    steptrace.step().__enter__()  # entered, never exited (an exception path that skipped __exit__)
    for _ in range(5):
        with steptrace.step():
            with steptrace.phase("forward"):
                pass
    outer = steptrace.step()  # a step inside a step: the inner closes the outer, every exit is harmless
    with outer:
        with steptrace.step():
            pass
    with steptrace.step():
        pass
    s = steptrace.stop()
    steps, _ = lines_of(log)
    assert s["steps"] == 9 and len(steps) == 9, (s, len(steps))
    assert all(l["phases"]["forward"]["count"] == 1 for l in steps[1:6]), [l["phases"] for l in steps]


def test_steps_opened_while_off_leave_nothing_behind():
    """A step closes in the extension whether or not steptrace runs (its scope is on the thread's stack
    from the open): 100 steps before start(), a loader() loop stopped part way and started again, and a
    loader() inside a program's step() (which it closes) all leave the later steps whole, and no exit
    raises into the program. In both line modes: the defaults (compact lines) and full ones."""
    saved = os.environ.pop("STEPTRACE_LINE_DETAIL", None)  # CTest asks for full lines: the defaults too
    try:
        for settings in ({}, {"line_detail": "full"}):
            steps_opened_while_off(settings)
    finally:
        if saved is not None:
            os.environ["STEPTRACE_LINE_DETAIL"] = saved


def steps_opened_while_off(settings):
    for _ in range(100):  # a warm-up before steptrace starts
        with steptrace.step():
            pass
    log = fresh("after_off_steps")
    assert steptrace.start(log_path=log, summary=False, gpu="off", **settings)
    for _ in range(5):
        with steptrace.step():
            with steptrace.phase("forward"):
                pass
    assert steptrace.stop()["steps"] == 5
    assert len(lines_of(log)[0]) == 5
    assert lines_of(log)[0][0]["schema"] == ("steptrace.step/1" if settings else "steptrace.step/2")  # the mode in force
    first, second = fresh("loader_stopped"), fresh("loader_again")
    assert steptrace.start(log_path=first, summary=False, gpu="off", **settings)
    for i, _ in enumerate(steptrace.loader(range(80))):  # the first 10 steps of an epoch only
        if i == 10:
            steptrace.stop()
    assert steptrace.start(log_path=second, summary=False, gpu="off", **settings)
    for _ in steptrace.loader(range(5)):
        pass
    assert steptrace.stop()["steps"] == 6  # 5 batches and the wait that finds the loader exhausted
    assert len(lines_of(first)[0]) == 11 and len(lines_of(second)[0]) == 6
    nested = fresh("loader_in_step")
    assert steptrace.start(log_path=nested, summary=False, gpu="off", **settings)
    for _ in range(2):
        with steptrace.step():  # closed where the loader's first step begins; its exit finds nothing
            for _ in steptrace.loader(range(3)):
                pass
    assert steptrace.stop()["steps"] == 10
    from steptrace import _driver
    assert _driver.holder() is None


def test_stop_without_start_and_scopes_when_off():
    assert not steptrace.is_running()
    with steptrace.step():
        with steptrace.phase("forward"):
            steptrace.record("loss", 1.0)
    s = steptrace.stop()
    assert s["started"] is False


def main():
    return run_tests(globals(), "test_steptrace")


if __name__ == "__main__":
    sys.exit(main())
