"""The one owner of a thread's steptrace step: who opened it, where it ends, and the step kept open past
its training work. step(), loader(), watch() and the framework callbacks (steptrace._callback_steps)
open and close steps only through it, so one rule decides for all of them:

- one step is open per thread, held by the opener that began it (a `step` object, a loader() loop,
  watch, a framework callback);
- a step done with its training work (watch after optimizer.step(), the callbacks after their step's
  end) stays open until the next step's work begins, so its time is the iteration's as the program's
  clock reads it (the host returns from optimizer.step() long before the GPU is done, and the read
  that waits for it comes after); work that is no step's ends it first, at its own start: an
  evaluation, a phase the program opens between steps, the framework's validation or checkpoint,
  stop() (which ends it where its training work was done);
- a step another opener begins while one is open ends the open one there (a new loop over a kept-open
  step; a callback's step inside the program's); the program's own `with steptrace.step()` meeting a
  step watch() opened and still doing training work (its loader's wait for the batch) takes that step
  over instead: one line per iteration, watch then adds phases only;
- an opener that only adds phases (watch without an optimizer, or watch inside the program's or a
  callback's steps) opens none while another holds the step;
- a step closes in the extension whether or not steptrace still runs: its scope is on the thread's
  stack from the open (a stopped runtime ignores the close), so a program that opens steps before
  start() or after stop() leaves nothing behind.

Per thread (threading.local): two trainers on two threads keep theirs apart, and stop() on another
thread than the training one finds none and leaves the step to the runtime's stop(), which closes it
where its training work was done. Pure Python over the extension's step calls.
"""
import threading

from . import _steptrace


class Holder:
    """What opens steps through the driver. `kind` names it in messages; closing() runs just before its
    step closes (a phase the opener keeps open closes first); close_at_stop: stop() closes a step it holds
    that is still doing training work (watch's: stopped mid-step) rather than leaving it to the runtime;
    yields_to_program: the program's own step() takes over a step it holds that is still doing training
    work (watch's), rather than closing it; framework: a framework's callbacks open its steps (their lines
    claim no upper end for the cost: docs/python.md)."""
    __slots__ = ()
    kind = "opener"
    close_at_stop = False
    yields_to_program = False
    framework = False

    def closing(self):
        pass


class _Driver(threading.local):
    def __init__(self):  # run again in each thread that reads it (no __slots__: they would be shared)
        self.holder = None   # the open step's opener, or None: no step open on this thread
        self.ending = False  # its training work is done: it ends where the next step's work begins


_driver = _Driver()
state = _driver  # read directly by the callbacks' phase changes (one attribute read, not a call)


def holder():
    """The opener holding this thread's step, or None."""
    return _driver.holder


def holds(h):
    return _driver.holder is h


def ending():
    """Whether this thread's step is done with its training work (kept open for the next one)."""
    return _driver.ending


def open_step(h, tokens=None, samples=None, always=False):
    """`h` begins a step (tokens/samples: this step's, None: the run's tokens_per_step). Its own step still
    doing training work stays open (a micro-batch of it): False. Any other open step ends here first.
    Not running: no step unless `always` (a `step` object: the runtime ignores it then). True when opened."""
    d = _driver
    if d.holder is not None:
        if d.holder is h and not d.ending:
            return False
        close_step()
    if not always and not _steptrace.is_running():
        return False
    _steptrace.step_enter(tokens, samples, h.framework)
    d.holder, d.ending = h, False
    return True


def hand_over(h):
    """`h` takes over the open step (still doing training work) from its opener: it closes it from now on."""
    d = _driver
    if d.holder is not None and not d.ending:
        d.holder = h


def work_done(h):
    """`h`'s step is done with its training work: it ends where the next step's work begins, or where work
    that is no step's does. The cross-rank view compares ranks up to here."""
    d = _driver
    if d.holder is not h or d.ending:
        return
    d.ending = True
    _steptrace.step_work_done()


def close_step(at_work_end=False):
    """Ends this thread's open step now, or, at_work_end (stop()), where its training work was done. Its
    holder's closing() runs first; the values recorded in the step are read; the step closes even if
    either fails. True when a step was closed."""
    d = _driver
    h = d.holder
    if h is None:
        return False
    d.holder, d.ending = None, False
    try:
        h.closing()
    finally:
        end_step(at_work_end)  # also when stopped meanwhile: the scope leaves the thread's stack
    return True


def end_if_ending(at_work_end=False):
    """Work that is no step's begins: a step kept open past its training work ends here. True when one did."""
    if not _driver.ending:
        return False
    return close_step(at_work_end)


def close_at_stop():
    """stop() on this thread: a kept-open step ends where its training work was done; a step whose opener
    asks for it (watch's, stopped mid-step) ends now; any other is the runtime's to close."""
    d = _driver
    if d.holder is None:
        return
    if d.ending:
        close_step(at_work_end=True)
    elif d.holder.close_at_stop:
        close_step()


def forget():
    """A fork's child: the parent's step is not its to close."""
    d = _driver
    d.holder, d.ending = None, False


_package = None  # steptrace, once imported (it imports this module)


def end_step(at_work_end=False):
    """The extension's end of the open step; the values recorded in it are read first (the step closes
    even if that fails), and the cross-rank view's completed gathers are handed back after. Each step
    meets this: what it calls only when there is something to do is checked here first (a Python call
    costs ~1 us between a framework's work)."""
    global _package
    st = _package
    if st is None:
        import steptrace as st
        _package = st
    try:
        if st._pending:
            st._resolve_pending()
    finally:
        if at_work_end:
            _steptrace.step_exit_at_work_end()
        else:
            _steptrace.step_exit()
        g = st._ranks._gather
        if g is not None and g.pending:
            st._ranks._pump()
