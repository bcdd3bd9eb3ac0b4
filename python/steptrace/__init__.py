"""steptrace for Python programs: where each training step's GPU time goes, one JSON line per step.

    import torch
    import steptrace
    steptrace.start(log_path="steps-{rank}.jsonl", tokens_per_step=batch * seq)
    for batch in steptrace.loader(dataloader):        # each iteration is a step; the wait is `input`
        with steptrace.phase("forward"):
            loss = model(batch)
        with steptrace.phase("backward"):
            loss.backward()
        with steptrace.phase("optimizer"):
            opt.step()
        steptrace.record("loss", loss)                 # a 0-d tensor: no sync here (see record)
    summary = steptrace.stop()

The same runtime as the C++ header (built into the `_steptrace` extension): the same settings as
keyword arguments (STEPTRACE_* environment variables still win), the same lines, the same names.
Phases are host scopes (and NVTX ranges); GPU time per phase comes from CUPTI, which files each
kernel under the phase open on the thread that launched it, or, for threads with no phase of their own
(autograd's backward threads), under the phase open on the step's thread.

The package's tools are pure Python and import without the extension (a source tree, a machine that
only reads logs): steptrace.report (the HTML report, `steptrace-report`), steptrace.ctl and
steptrace.merge (`steptrace-ctl`), steptrace.lines (reading a log's records), steptrace.files.
"""
import difflib
import numbers
import atexit
import os
import functools
import math
import threading


class _ExtensionMissing:
    """Stands for the extension where it cannot be imported: the tools work, the runtime says why not."""

    def __init__(self, error):
        self._error = error

    def __getattr__(self, name):
        raise ImportError("steptrace: the runtime needs the compiled extension steptrace._steptrace, which "
                          f"could not be imported ({self._error}); `pip install ./python` builds it. "
                          "steptrace.report, steptrace.ctl and steptrace.lines work without it.")


try:
    import importlib as _importlib
    _steptrace = _importlib.import_module("._steptrace", __name__)
except ImportError as _error:
    _steptrace = _ExtensionMissing(_error)

from . import _driver  # noqa: E402  (the thread's step: who holds it, where it ends; needs _steptrace above)
_thread_step = _driver._driver  # read by every phase's __enter__

__all__ = ["start", "stop", "is_running", "step", "phase", "record", "set_step_tokens", "capture_steps",
           "set_marker_stream", "loader", "watch", "unwatch", "cross_rank", "use_torch_memory", "settings"]

BUILTIN_PHASES = ("input", "h2d", "forward", "backward", "optimizer", "nccl")
settings = ({name: {"variable": var, "accepted": rng, "doc": doc} for name, var, rng, doc in _steptrace.settings}
            if not isinstance(_steptrace, _ExtensionMissing) else {})

_phases = {}
_phases_lock = threading.Lock()
_atexit_registered = False
_pending = []        # (name, host tensor, event): values recorded from CUDA tensors, read at the step's end
_staging = {}        # (name, dtype) -> (pinned host tensor, event), made once and reused every step


def _after_fork_in_child():
    """A child made by os.fork() (multiprocessing's fork, DataLoader workers) has steptrace off until it
    starts anew: the package's own lock is made again (another thread may have held it at the fork) and
    the parent's pending CUDA values are forgotten (CUDA cannot be used in such a child)."""
    global _phases_lock
    _phases_lock = threading.Lock()
    _pending.clear()
    _staging.clear()
    _driver.forget()  # the parent's step: not the child's to close


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def start(**settings_):
    """Starts measuring. Keyword arguments are Config fields (docs/configuration.md): log_path,
    tokens_per_step, flops_per_token, trace_every, ... ; model_parallel={"tensor": 4, ...}. A wrong name
    raises TypeError, a wrong value ValueError; STEPTRACE_* variables override what is given here.
    Returns False when steptrace stays off (disabled, already running). stop() runs at exit if the
    program does not call it."""
    global _atexit_registered
    names = [s[0] for s in _steptrace.settings]
    groups = {n.split(".")[0] for n in names if "." in n}  # model_parallel={"tensor": 4, ...}
    for name in settings_:
        if name not in names and name not in groups:
            close = difflib.get_close_matches(name, names, n=1)
            raise TypeError(f"steptrace.start(): unknown setting {name!r}" + (f"; did you mean {close[0]!r}?" if close else "") +
                            " (the settings: steptrace.settings, docs/configuration.md)")
    # The rank torch.distributed knows (a launcher without RANK: Lightning's, mp.spawn), where the
    # program and STEPTRACE_RANK give none.
    settings_ = _ranks.rank_settings(settings_, _ranks.framework_rank())
    ok = _steptrace.start(**settings_)
    if ok and not _atexit_registered:
        atexit.register(_stop_at_exit)
        _atexit_registered = True
    return ok


def _stop_at_exit():
    if _steptrace.is_running():
        try:
            _driver.close_at_stop()
            _resolve_pending()
        finally:
            _ranks._end()
            _steptrace.stop()


def stop():
    """Closes the last step, writes the remaining lines and releases CUPTI (a profiler started after
    this can use it). Returns the run's summary as a dict."""
    # A step kept open for the next one (watch, the callbacks) ends where its training work was done: the
    # last line; one watch() holds open mid-step ends now; another thread's: the runtime closes it.
    _driver.close_at_stop()
    _resolve_pending()
    _ranks._end()  # the cross-rank exchange ends with the run (a next one sets it up again)
    return _steptrace.stop()


def is_running():
    return _steptrace.is_running()


class _Scope:
    """A reusable context manager that is also a decorator."""
    __slots__ = ()

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapped


class _Phase(_Scope):
    __slots__ = ("name", "_id")

    def __init__(self, name, id_):
        self.name = name
        self._id = id_

    def __enter__(self):
        if _thread_step.ending:
            _driver.end_if_ending()  # a phase the program opens between steps: no step's
        _steptrace.phase_enter(self._id)
        return self

    def __exit__(self, *exc):
        _steptrace.phase_exit()
        return False

    def __repr__(self):
        return f"steptrace.phase({self.name!r})"


def phase(name):
    """The phase scope `name`: a context manager (``with steptrace.phase("forward"):``) and a decorator
    (``@steptrace.phase("forward")``). Built-in names: input, h2d, forward, backward, optimizer, nccl;
    any other valid name (a-z, 0-9, '_', '.', '-', starting with a letter, at most 48) is a custom phase.
    The object is made once per name and reused: entering it allocates nothing."""
    p = _phases.get(name)
    if p is not None:
        return p
    if not isinstance(name, str):
        raise TypeError(f"steptrace.phase(name): a str is wanted, got {type(name).__name__}")
    with _phases_lock:
        p = _phases.get(name)
        if p is None:
            id_ = _steptrace.builtin_phase(name)
            if id_ < 0:
                id_ = _steptrace.register_phase(name)  # ValueError for a bad name
                close = difflib.get_close_matches(name, BUILTIN_PHASES, n=1, cutoff=0.75)
                if close:  # C++ refuses TRACE_PHASE(forwrd) at compile time; here it would pass unnoticed
                    _steptrace.warn_once("phase.spelling." + name,
                                         f"steptrace.phase({name!r}) is a custom phase, not the built-in {close[0]!r} "
                                         "(did you mean it?); its time is reported under its own name")
            p = _phases[name] = _Phase(name, id_)
    return p


BUILTIN_PHASES = ("input", "h2d", "forward", "backward", "optimizer", "nccl")


def _number(what, v):
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TypeError(f"steptrace.step({what}=...): a number is wanted, got {type(v).__name__}")
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"steptrace.step({what}={v!r}): a finite number >= 0 is wanted")
    return float(v)


class step(_Scope, _driver.Holder):
    """One training step: ``with steptrace.step(tokens=4096):`` or ``@steptrace.step()``. Step N's time
    runs from its start to step N+1's start. tokens/samples: this rank's, when tokens_per_step is not
    the same every step. A step that watch() or a framework callback holds open ends where this one
    begins (the program's own steps win; watch then adds phases only)."""
    __slots__ = ("tokens", "samples")
    kind = "steptrace.step()"

    def __init__(self, tokens=None, samples=None):
        self.tokens = _number("tokens", tokens)
        self.samples = _number("samples", samples)
        if self.samples is not None and self.tokens is None:
            raise ValueError("steptrace.step(samples=...): give tokens too")

    def __enter__(self):
        held = _driver.holder()
        if isinstance(held, _LoaderSteps):
            raise RuntimeError("steptrace.step() inside a steptrace.loader() loop: the loader makes the steps")
        if held is not None and not _driver.ending():
            if held.yields_to_program:
                # watch()'s step, opened by its loader's wait for this batch: the program's own step
                # takes it over (one line per iteration; watch adds phases only from here on).
                _driver.hand_over(self)
                if self.tokens is not None:
                    _steptrace.set_step_tokens(self.tokens, self.samples)
                return self
            # A step is open on this thread: one entered and never exited (an exception path that
            # skipped __exit__, a generator left half-way), a step inside a step, or a framework
            # callback's. Left so, every later step would be ignored; instead it is closed here (the
            # __exit__ it may still owe finds nothing of its own to close).
            what = "another step" if isinstance(held, step) else "a step " + held.kind + " opened"
            _steptrace.warn_once("step.nested", f"steptrace.step() entered while {what} is open on this thread "
                                                "(entered and never exited, or nested): the open step is closed here")
            _driver.close_step()
        _driver.open_step(self, self.tokens, self.samples, always=True)
        return self

    def __exit__(self, *exc):
        # Its own open step closes; one closed already (when the next began, or by another opener) or
        # entered on another thread (a generator finalised elsewhere) leaves nothing here to close.
        if _driver.holds(self):
            _driver.close_step()
        return False


class _LoaderSteps(_driver.Holder):
    """A steptrace.loader() loop's steps (one holder per loop)."""
    __slots__ = ()
    kind = "steptrace.loader()"


def _resolve_pending():
    """Values recorded from CUDA tensors this step: their copies were queued when recorded; wait for
    each copy's event (the GPU reaching the point where the value was computed, not the step's end)."""
    if not _pending:
        return
    items = list(_pending)
    _pending.clear()
    if not _steptrace.is_running():
        return  # stopped meanwhile: nothing to attach them to
    for name, host, event in items:
        event.synchronize()
        _steptrace.record(name, float(host))


def record(name, value):
    """Attaches a scalar (loss, grad_norm, lr ...) to the current step: a Python number or a 0-d (one
    element) tensor. A CUDA tensor is not read here: its value is copied to pinned host memory
    asynchronously and read when the step ends, so the host goes on queueing work (a .item() here
    would wait for the GPU to finish everything queued before it)."""
    if isinstance(value, bool):
        value = float(value)
    if isinstance(value, numbers.Real):  # int, float, Fraction, NumPy's scalars (np.float32, np.int64, ...)
        try:
            number = float(value)
        except OverflowError:
            raise ValueError(f"steptrace.record({name!r}, ...): {type(value).__name__} too large for a float") from None
        _steptrace.record(str(name), number)
        return
    numel = getattr(value, "numel", None)
    if numel is None:
        raise TypeError(f"steptrace.record({name!r}, ...): a number or a one-element tensor is wanted, "
                        f"got {type(value).__name__}")
    if numel() != 1:
        raise ValueError(f"steptrace.record({name!r}, tensor): the tensor has {numel()} elements, one is wanted")
    if not _steptrace.is_running():
        return  # nothing to attach it to: the value is never read (for a CUDA tensor that would be a wait)
    if getattr(value, "is_cuda", False):
        key = (str(name), value.dtype)
        staged = _staging.get(key)
        if staged is None or any(p[1] is staged[0] for p in _pending):
            import torch
            staged = (torch.empty((), dtype=value.dtype, pin_memory=True), torch.cuda.Event())
            if len(_staging) < 256:
                _staging[key] = staged
        host, event = staged
        host.copy_(value.detach().reshape(()), non_blocking=True)
        event.record()
        _pending.append((str(name), host, event))
        return
    _steptrace.record(str(name), float(value.detach().reshape(()).item()))


def set_step_tokens(tokens, samples=None):
    """Sets the current step's token (and sample) count when it is only known inside the step."""
    _steptrace.set_step_tokens(float(tokens), None if samples is None else float(samples))


def capture_steps(n=1):
    """Writes the next n steps to begin as a trace (phase scopes, kernels, copies; Perfetto opens it)."""
    return _steptrace.capture_steps(int(n))


def set_marker_stream(stream):
    """Names the CUDA stream the step's work runs on, for the stream markers (docs/gpu.md): a
    torch.cuda.Stream or a cudaStream_t as an int. Not needed for PyTorch's default stream. Call it
    before the run's first step; the stream must outlive stop(), which forgets it."""
    handle = getattr(stream, "cuda_stream", stream)
    if isinstance(handle, bool) or not isinstance(handle, int) or handle < 0:
        raise TypeError("steptrace.set_marker_stream(stream): a torch.cuda.Stream or a cudaStream_t (int), not %r" % (stream,))
    _steptrace.set_marker_stream(handle)


def loader(iterable, tokens=None, samples=None):
    """Iterates `iterable` (a DataLoader) making each iteration a step: the step begins when the wait
    for its batch begins (that wait is the `input` phase) and ends when the next wait begins.
    tokens/samples: per step, a number or a function of the batch.

    The wait that finds the loader exhausted is one more step (its line holds that `input` wait, with 0
    tokens and 0 samples: it processed none); what
    the program does after the loop (evaluation, a checkpoint) belongs to no step: it is the next
    line's `between_steps`, or the end record's `after_last_step` after the last one."""
    it = iter(iterable)
    me = _LoaderSteps()
    try:
        while True:
            if _driver.holds(me):
                _driver.close_step()
            t = None if callable(tokens) else _number("tokens", tokens)
            s = None if callable(samples) else _number("samples", samples)
            _driver.open_step(me, t, s, always=True)
            _steptrace.phase_enter(0)  # input
            try:
                batch = next(it)
            except StopIteration:
                _steptrace.phase_exit()
                # No batch, no work: the line of this last wait says 0 tokens and 0 samples, whatever
                # tokens/samples (or tokens_per_step) say for the steps that had a batch.
                _steptrace.set_step_tokens(0.0, 0.0)
                return
            _steptrace.phase_exit()
            if callable(tokens):
                t = _number("tokens", tokens(batch))
                s2 = _number("samples", samples(batch)) if callable(samples) else s
                _steptrace.set_step_tokens(t, s2)
            yield batch
    finally:
        # Finalised on another thread (garbage collection): that thread holds none of it; the training
        # thread's next step closes it (steptrace._driver).
        if _driver.holds(me):
            _driver.close_step()


def use_torch_memory(device=None):
    """Fills each line's memory.allocator from PyTorch's caching allocator (torch.cuda.memory_stats:
    allocated, reserved, their peaks over the step, allocation retries, OOMs); peaks are reset at each
    step's end. Returns False, with one warning, when torch or CUDA is not there."""
    try:
        import torch
    except ImportError:
        _steptrace.warn_once("torch_memory", "use_torch_memory(): torch cannot be imported; memory.allocator stays null")
        return False
    if not torch.cuda.is_available():
        _steptrace.warn_once("torch_memory", "use_torch_memory(): torch sees no CUDA device; memory.allocator stays null")
        return False

    def hook():
        s = torch.cuda.memory_stats(device)
        torch.cuda.reset_peak_memory_stats(device)
        return {
            "allocated_bytes": s.get("allocated_bytes.all.current"),
            "reserved_bytes": s.get("reserved_bytes.all.current"),
            "peak_allocated_bytes": s.get("allocated_bytes.all.peak"),
            "peak_reserved_bytes": s.get("reserved_bytes.all.peak"),
            "alloc_retries": s.get("num_alloc_retries"),
            "ooms": s.get("num_ooms"),
        }

    _steptrace.set_allocator_hook(hook)
    return True


from . import ranks as _ranks  # noqa: E402  (imports torch only when called)
from .ranks import cross_rank  # noqa: E402
from .watch import watch, unwatch  # noqa: E402
