"""The collective wait at the end of backward, measured on the GPU every step (the cross-rank view's
``backward_end`` basis, docs/schema.md ``cross_rank``).

Data-parallel frameworks wait for their gradient collectives where backward ends: DDP's reducer and
FSDP queue an autograd callback that makes the compute stream wait for the all-reduce (reduce-scatter)
of the last buckets. A rank that waits there for a slower one has its compute stream idle until the
collective ends. Two CUDA events a backward measure it: one recorded by an autograd callback queued as
the backward starts (callbacks run in the order queued, so it runs before the framework's, once every
backward kernel is launched, on the caller's stream), one after backward returns. The GPU time between
them is the collectives' tail the stream waited for: transfer time on the rank that arrived last, the
wait for it on the others. The waits of a step's backward calls (micro-batches under ``no_sync()``) are
summed and handed to the runtime once the step's events are reached; nothing here waits for the GPU.

FSDP also waits for its all-gathers in forward: each sharded module's own pre-forward hook makes the
compute stream wait for its parameters. ``steptrace.watch()`` brackets that hook on every FSDP module
(``fsdp_hooks``: an event in a pre-hook that runs before FSDP's and one in a pre-hook that runs after),
and those waits join the step's sum. A loop that shards with FSDP and does not use ``watch()`` (or the
Hugging Face callback, which does) gets the end-of-backward part only.

Installed by ``steptrace.cross_rank()`` (where CUDA is available), on ``torch.autograd.backward`` (which
``Tensor.backward`` calls), once per process; it passes straight through while no exchange runs. It
never raises into training: a failure switches it off with one warning.
"""
import collections

from . import _steptrace

_MAX_PENDING = 256  # event pairs not yet reached on the GPU; past this the oldest are dropped (counted)


class _State:
    def __init__(self):
        self.on = False
        self.torch = None
        self.installed = None  # the wrapper, once installed
        self.pending = collections.deque()  # (step, start event, end event)
        self.acc_step = None  # the step whose waits are being summed
        self.acc_ms = 0.0
        self.dropped = 0
        self.framework = None  # DDP or FSDP in this process (decided at the first measured backward)


_state = _State()


def _drain():
    """Hands the waits of steps whose events are all reached to the runtime (one value per step)."""
    s = _state
    if s.torch is not None and _capturing(s.torch):
        return
    while s.pending:
        step, start, end = s.pending[0]
        if not end.query():
            return
        s.pending.popleft()
        ms = start.elapsed_time(end)
        if s.acc_step is not None and step != s.acc_step:
            _steptrace.collective_wait(s.acc_ms)
            s.acc_ms = 0.0
        s.acc_step = step
        s.acc_ms += max(0.0, ms)


def _first_tensor(tensors):
    t = tensors
    if isinstance(t, (list, tuple)):
        t = t[0] if len(t) else None
    return t


def _off(e):
    _state.on = False
    _state.pending.clear()
    _state.acc_step, _state.acc_ms = None, 0.0
    _steptrace.warn_once("waits.failed", f"steptrace: the backward_end wait measure failed ({type(e).__name__}: {e}); "
                                         "it is switched off, training goes on")


def _capturing(torch):
    """A CUDA graph is being captured on this thread's stream: no event, no query (either would break the
    capture; the C++ stream markers skip capturing streams too)."""
    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except Exception:  # noqa: BLE001 - an older torch: take it as capturing, measure nothing
        return True


def _framework_syncs(torch):
    """Whether this process trains with a framework that waits for its gradient collectives at the end of
    backward (DDP, FSDP): decided once, at the first measured backward, from the modules alive then.
    Without one the end-of-backward wait would read ~0 on every rank whatever the job's collectives wait
    (a manual all_reduce after backward, a sync in the optimizer), and a view could call that balanced:
    the measure switches itself off."""
    s = _state
    if s.framework is None:
        import gc
        kinds = []
        try:
            from torch.nn.parallel import DistributedDataParallel
            kinds.append(DistributedDataParallel)
        except Exception:  # noqa: BLE001
            pass
        for where, name in (("torch.distributed.fsdp", "FSDPModule"), ("torch.distributed._composable.fsdp", "FSDPModule"),
                            ("torch.distributed.fsdp", "FullyShardedDataParallel")):
            try:
                kinds.append(getattr(__import__(where, fromlist=[name]), name))
            except Exception:  # noqa: BLE001
                pass
        kinds = tuple(kinds)
        s.framework = bool(kinds) and any(isinstance(o, kinds) for o in gc.get_objects() if isinstance(o, torch.nn.Module))
        if not s.framework:
            s.on = False
            _steptrace.warn_once("waits.no_framework", "steptrace: no DistributedDataParallel or FSDP module in this "
                                                       "process: the end-of-backward wait is not measured (tag your "
                                                       "collectives with steptrace.phase('nccl') for the cross-rank view)")
    return s.framework


def _measure(torch, inner, args, kwargs):
    """The program's backward between steptrace's two events; steptrace's own failure switches the
    measure off, the program's exception passes through unchanged (the backward runs once, outside any
    handler of steptrace's)."""
    handle = None
    recorded = []
    try:
        t = _first_tensor(args[0] if args else kwargs.get("tensors"))
        measure = (t is not None and getattr(t, "requires_grad", False) and getattr(t, "is_cuda", False)
                   and not _capturing(torch) and _framework_syncs(torch))
        step = _steptrace.steps_begun() if measure else -1
        if step >= 0:
            handle = _arm(torch, t, recorded)
    except Exception as e:  # noqa: BLE001
        _off(e)
        handle = None
    if handle is None:
        return inner(*args, **kwargs)
    start = recorded.pop()  # the event the callback records
    try:
        result = inner(*args, **kwargs)
    finally:
        try:
            handle.remove()
        except Exception as e:  # noqa: BLE001
            _off(e)
    try:
        if recorded and _state.on and not _capturing(torch):
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            _pair(start, end, step)
        _drain()
    except Exception as e:  # noqa: BLE001
        _off(e)
    return result


def _arm(torch, t, recorded):
    """A hook at the loss that queues the end-of-backward callback; `recorded` holds the start event, then
    True once the callback recorded it. Returns the hook's handle."""
    start = torch.cuda.Event(enable_timing=True)

    def at_end():  # an autograd final callback: every backward kernel launched, the framework's to run
        try:
            start.record()
            recorded.append(True)
        except Exception as e:  # noqa: BLE001
            _off(e)

    def at_root(grad):
        try:
            torch.autograd.Variable._execution_engine.queue_callback(at_end)
        except Exception as e:  # noqa: BLE001
            _off(e)
        return None

    handle = t.register_hook(at_root)
    recorded.append(start)
    return handle


def _pair(start, end, step):
    s = _state
    if len(s.pending) >= _MAX_PENDING:  # the oldest step's pairs all go: a partial sum is no step's wait
        first = s.pending[0][0]
        while s.pending and s.pending[0][0] == first:
            s.pending.popleft()
            s.dropped += 1
        if s.acc_step == first:  # its summed part goes too
            s.acc_step, s.acc_ms = None, 0.0
        _steptrace.warn_once("waits.dropped", f"steptrace: more than {_MAX_PENDING} collective waits' events not yet "
                                              "reached on the GPU: the oldest are dropped (their steps' cross-rank wait "
                                              "is not measured)")
    s.pending.append((step, start, end))


def fsdp_hooks(torch, model, is_compiling):
    """watch(): brackets FSDP's pre-forward hook on each FSDP module of `model`; returns the hook handles
    (none when the model has no FSDP module)."""
    try:
        try:
            from torch.distributed.fsdp import FSDPModule  # torch >= 2.6
        except ImportError:
            from torch.distributed._composable.fsdp import FSDPModule
    except Exception:  # noqa: BLE001 - no FSDP2 in this torch
        return []
    handles = []
    try:
        mods = [m for m in model.modules() if isinstance(m, FSDPModule)]
    except Exception:  # noqa: BLE001
        return []
    for m in mods:
        open_ = {}

        def before(module, args, _open=open_):
            if not _state.on or is_compiling() or not torch.is_grad_enabled() or not module.training or _capturing(torch):
                return None
            try:
                step = _steptrace.steps_begun()
                if step >= 0:
                    e = torch.cuda.Event(enable_timing=True)
                    e.record()
                    _open["e"] = (step, e)
            except Exception as ex:  # noqa: BLE001
                _off(ex)
            return None

        def after(module, args, _open=open_):
            opened = _open.pop("e", None)
            if opened is None or not _state.on or is_compiling() or _capturing(torch):
                return None
            try:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                _pair(opened[1], end, opened[0])
            except Exception as ex:  # noqa: BLE001
                _off(ex)
            return None

        try:
            handles.append(m.register_forward_pre_hook(before, prepend=True))  # before FSDP's own
            handles.append(m.register_forward_pre_hook(after))                 # after it
        except Exception as ex:  # noqa: BLE001
            _off(ex)
            break
    return handles


def install(torch):
    """Once per process: wraps torch.autograd.backward. Returns whether the measure is on."""
    s = _state
    try:
        if not torch.cuda.is_available():
            return False
        if s.installed is None:
            original = torch.autograd.backward
            inner = [original]

            def backward(*args, **kwargs):
                if not _state.on:
                    return inner[0](*args, **kwargs)
                try:
                    if torch.compiler.is_compiling() if hasattr(torch, "compiler") else False:
                        return inner[0](*args, **kwargs)
                except Exception:  # noqa: BLE001
                    pass
                return _measure(torch, inner[0], args, kwargs)

            backward.__wrapped__ = original
            backward.__doc__ = original.__doc__
            backward.__name__ = backward.__qualname__ = original.__name__
            backward._steptrace_inner = inner  # unwatch() re-points it when watch()'s wrapper was beneath
            torch.autograd.backward = backward
            s.installed = backward
        s.torch = torch
        s.framework = None  # decided again at this run's first measured backward
        s.on = True
        return True
    except Exception as e:  # noqa: BLE001 - the view goes on with the evidence it has
        _steptrace.warn_once("waits.install", f"steptrace: the backward_end wait is not measured ({type(e).__name__}: {e})")
        return False


def stop():
    """The exchange ended (stop()): the measure passes through; what is pending is dropped."""
    s = _state
    s.on = False
    s.pending.clear()
    s.acc_step = None
    s.acc_ms = 0.0
