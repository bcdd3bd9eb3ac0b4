"""steptrace.watch: the phases of a PyTorch training loop from hooks, without a scope in the loop.

    train_loader = steptrace.watch(model, optimizer, train_loader)

- a step begins with training work (the wait for a batch, a forward in training mode with gradients on,
  a backward, an optimizer step) and runs until the next step's begins: what follows ``optimizer.step()``
  in the iteration (``zero_grad``, the ``loss.item()`` that waits for the GPU, the log line) is the
  step's, so its time is the iteration's as the program's own clock reads it (the host returns from
  ``optimizer.step()`` long before the GPU has run the step). Gradient accumulation (several forward
  and backward passes per step) is one step. Work that is no step's ends the step at its own start and
  is the next line's ``between_steps``: an evaluation (a forward in ``model.eval()`` or under
  ``torch.no_grad()``), a phase the program opens between steps (``steptrace.phase("checkpoint")``),
  ``stop()``;
- ``input``: the wait for the next batch of the loader handed in (the returned iterable);
- ``forward``: the outermost module's forward (hooks on the module as given: the DDP or FSDP wrapper, or
  the compiled module), training forwards only;
- ``backward``: each ``Tensor.backward()`` / ``torch.autograd.backward()`` / ``torch.autograd.grad()``
  call, on the calling thread (the kernels autograd launches from its own threads go to the phase open on
  this one);
- ``optimizer``: ``optimizer.step()`` (its step hooks where torch has them, else a wrapper of the method).

An evaluation through another module object than the watched one (DDP's ``.module``, the uncompiled
original of a watched compiled module) is seen where the watched module is switched to ``eval()``; one
that switches nothing and is not under ``torch.no_grad()``, and untagged work between steps (``torch.save``
without a ``steptrace.phase``), is in the step.

A step whose ``optimizer.step()`` never ran (a GradScaler that found inf and skipped it) is done with its
training work at the next ``optimizer.zero_grad()`` after a backward. Manual phases (``steptrace.phase``) still work and nest
inside these. A loop that opens its own steps (``steptrace.step``, ``steptrace.loader``) keeps them:
watch then adds phases only. Nothing here is traced by torch.compile: each hook returns at once while
dynamo traces (``torch.compiler.is_compiling()``), so a hook inside a compiled region adds no graph break
(and no phase). ``steptrace.unwatch()`` removes every hook. Steps and phases are the training thread's (the one that called watch()):
a loader iterated, or a backward run, on another thread passes through. The cross-rank view is one more
call on every rank (``steptrace.cross_rank()``): a collective, so it is never made behind the program's
back."""
import threading

from . import _driver, _steptrace

_PHASE_IDS = {"input": 0, "forward": 2, "backward": 3, "optimizer": 4}  # core/phase.hpp's built-in ids


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.handles = []        # hook handles to remove
        self.restore = []        # (object, attribute, original) to put back
        self.backward_seen = False
        self.forward_seen = False  # a forward phase in the open step
        self.blind_steps = 0     # steps in a row with a backward and no forward phase
        self.owner = None        # the thread that called watch(): the training thread
        self.in_optimizer = False  # an optimizer phase open (a step that raised leaves it so: closed at the next)
        self.tokens = None       # number or callable(batch)
        self.samples = None
        self.step_tokens = 0.0   # the open step's batches' tokens so far (tokens callable)
        self.step_samples = None
        self.active = False
        self.steps = True        # watch opens and closes steps (False: phases only, watch(model) alone)


_state = _State()

# Said once when two steps in a row had a backward and no forward phase: the forward's work is then in
# the step under no phase (untracked).
_NO_FORWARD = ("steptrace.watch: two steps in a row ran a backward but no forward of the watched module: its "
               "forward runs outside its hooks. Either the module was compiled after watch() (torch.compile(model) "
               "and model.compile() compile the hooks with it: watch the compiled module, or call watch() after "
               "compiling), or the loop calls model.forward(...) rather than model(...), or the forward runs "
               "in eval() mode. The forward's time is counted in the step, under no phase.")


def _compiling_check(torch):
    """torch.compiler.is_compiling (torch >= 2.2), torch._dynamo.is_compiling before it, or none (1.x)."""
    compiler = getattr(torch, "compiler", None)
    fn = getattr(compiler, "is_compiling", None)
    if fn is None:
        dynamo = getattr(torch, "_dynamo", None)
        fn = getattr(dynamo, "is_compiling", None) if dynamo is not None else None
    return fn if fn is not None else (lambda: False)


def _on_owner():
    """Steps and phases are the training thread's (the one that called watch()): work on other threads
    (a prefetching loader, autograd's threads re-running a checkpointed forward) passes through."""
    return threading.get_ident() == _state.owner


class _WatchSteps(_driver.Holder):
    """watch()'s steps, as the thread's step driver (steptrace._driver) knows their opener."""
    kind = "steptrace.watch()"
    close_at_stop = True      # stopped mid-step: its line is written now
    yields_to_program = True  # the program's own step() takes over the step its loader's wait opened

    def closing(self):
        s = _state
        if not _steptrace.is_running():
            return  # stopped meanwhile: stop() closed it
        s.blind_steps = s.blind_steps + 1 if s.backward_seen and not s.forward_seen else 0
        if s.blind_steps == 2:
            _steptrace.warn_once("watch.no_forward", _NO_FORWARD)


_WATCH = _WatchSteps()


def _step_open():
    """watch's step is the one open on this thread."""
    return _driver.holds(_WATCH)


def _open_step():
    """The step watch keeps: opened by the first training work after the previous one closed (which ends
    there); none while the program's own step, a loader()'s or a callback's is open (phases only then)."""
    s = _state
    held = _driver.holder()
    if held is _WATCH and not _driver.ending():
        return False  # a micro-batch of the open step
    if not s.steps or (held is not None and held is not _WATCH):
        return False
    tokens = None if callable(s.tokens) else s.tokens
    samples = None if callable(s.samples) else s.samples
    if not _driver.open_step(_WATCH, tokens, samples):
        return False
    s.backward_seen = s.forward_seen = False
    s.step_tokens, s.step_samples = 0.0, None
    return True


def _done_with_training_work():
    """The open step's training work is done (optimizer.step() returned): it stays open until the next
    step's work begins, or work that is no step's does (steptrace._driver)."""
    _driver.work_done(_WATCH)


def _close_step():
    if _driver.holds(_WATCH):
        _driver.close_step()


class _Loader:
    """The loader handed to watch(), iterated with each wait for a batch as the `input` phase."""

    def __init__(self, loader):
        self._loader = loader

    def __len__(self):
        return len(self._loader)

    def __getattr__(self, name):  # sampler, dataset, batch_size ... as the loader has them
        return getattr(self._loader, name)

    def __iter__(self):
        it = iter(self._loader)
        while True:
            if not _state.active or not _on_owner():
                yield from it  # unwatched meanwhile, or iterated on another thread
                return
            opened = _open_step()
            _steptrace.phase_enter(_PHASE_IDS["input"])
            try:
                batch = next(it)
            except StopIteration:
                _steptrace.phase_exit()
                if opened:
                    # The wait that finds the loader exhausted opened a step of its own: no batch, no work
                    # (as steptrace.loader()). It ends here, so that what follows (an evaluation, the next
                    # epoch) is not in it.
                    _steptrace.set_step_tokens(0.0, 0.0)
                    _close_step()
                return
            except BaseException:
                _steptrace.phase_exit()
                raise
            _steptrace.phase_exit()
            s = _state
            if _step_open() and callable(s.tokens):
                # A step of several micro-batches holds all their tokens (and samples).
                from . import _number
                s.step_tokens += _number("tokens", s.tokens(batch))
                if callable(s.samples):
                    s.step_samples = (s.step_samples or 0.0) + _number("samples", s.samples(batch))
                _steptrace.set_step_tokens(s.step_tokens, s.step_samples)
            yield batch


def watch(model, optimizer=None, loader=None, tokens=None, samples=None):
    """Derives the step and its phases from hooks on `model` (the outermost module: DDP, FSDP or the
    compiled one), `optimizer` and, when given, `loader` (then returned, wrapped: iterate the returned
    object). tokens/samples: per step a number, or a function of a batch (with a loader: a step's batches'
    counts are summed). samples needs tokens. Returns the
    wrapped loader, or None without one. A second call replaces the first's hooks. Without an
    optimizer, watch adds phases only (forward, backward, input) to the steps the program (or a
    framework's callback: steptrace.transformers) opens; it opens none."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"steptrace.watch(model, ...): a torch.nn.Module is wanted, got {type(model).__name__}")
    if optimizer is not None and not callable(getattr(optimizer, "step", None)):
        raise TypeError(f"steptrace.watch(..., optimizer): an optimizer with step() is wanted, got {type(optimizer).__name__}")
    from . import _number
    if samples is not None and tokens is None:
        raise ValueError("steptrace.watch(samples=...): give tokens too")
    if callable(samples) != callable(tokens) and samples is not None:
        raise TypeError("steptrace.watch(tokens=, samples=): both numbers or both functions of the batch")
    for what, v in (("tokens", tokens), ("samples", samples)):
        if v is not None and not callable(v):
            _number(what, v)
    unwatch()
    is_compiling = _compiling_check(torch)  # looked up once: each hook calls it
    s = _state
    s.tokens, s.samples = tokens, samples
    s.owner = threading.get_ident()
    s.in_optimizer = False
    s.blind_steps = 0
    s.steps = optimizer is not None
    forward_id, backward_id, optimizer_id = _PHASE_IDS["forward"], _PHASE_IDS["backward"], _PHASE_IDS["optimizer"]
    depth = threading.local()  # forward re-entered (a module called inside itself): one phase

    import inspect
    always = "always_call" in inspect.signature(model.register_forward_hook).parameters  # torch >= 2.1

    def forward_pre(module, args):
        if is_compiling() or not _on_owner():
            return None
        if not (module.training and torch.is_grad_enabled()):
            # An evaluation: no step's. A step done with its training work (watch's, a callback's) ends here.
            if _driver.ending():
                _driver.end_if_ending()
            return None
        n = getattr(depth, "n", 0)
        if n and not always:
            # A forward that raised left its phase open (torch < 2.1 has no hook that runs on an
            # exception): closed here. (The outermost module calling itself would be counted once per call.)
            _steptrace.phase_exit()
            n = 0
        depth.n = n + 1
        if n == 0:
            _open_step()
            _state.forward_seen = True
            _steptrace.phase_enter(forward_id)
        return None

    def forward_post(module, args, output):
        if is_compiling() or not _on_owner():
            return None
        n = getattr(depth, "n", 0)
        if n <= 0:
            return None  # its pre-hook did not open a phase (evaluation, no_grad)
        depth.n = n - 1
        if n == 1:
            _steptrace.phase_exit()
        return None

    # FSDP's waits for its all-gathers in forward, for the cross-rank view (steptrace/_waits.py): registered
    # before the forward phase's pre-hook, which is prepended after them and so opens the step first.
    from . import _waits
    s.handles.extend(_waits.fsdp_hooks(torch, model, is_compiling))
    # First among the module's pre-hooks where torch allows (>= 2.0): what a wrapper's own pre-hook launches
    # (FSDP's all-gather of the parameters) is in the forward phase.
    prepend = "prepend" in inspect.signature(model.register_forward_pre_hook).parameters
    s.handles.append(model.register_forward_pre_hook(forward_pre, prepend=True) if prepend
                     else model.register_forward_pre_hook(forward_pre))
    s.handles.append(model.register_forward_hook(forward_post, always_call=True) if always
                     else model.register_forward_hook(forward_post))

    inside = threading.local()  # Tensor.backward calls torch.autograd.backward: one phase

    def wrap_backward(original):
        def backward(*args, **kwargs):
            if not _state.active or getattr(inside, "on", False) or not _on_owner() or is_compiling():
                return original(*args, **kwargs)
            _open_step()
            _state.backward_seen = True
            inside.on = True
            _steptrace.phase_enter(backward_id)
            try:
                return original(*args, **kwargs)
            finally:
                _steptrace.phase_exit()
                inside.on = False
        backward.__wrapped__ = original
        backward.__doc__ = original.__doc__
        backward.__name__ = backward.__qualname__ = original.__name__
        return backward

    # torch.autograd.grad too: loops that take gradients without .backward() (a gradient penalty,
    # meta-learning) get their backward pass as `backward` (inside another phase, nested in it).
    for owner, name in ((torch.Tensor, "backward"), (torch.autograd, "backward"), (torch.autograd, "grad")):
        original = getattr(owner, name)
        wrapper = wrap_backward(original)
        setattr(owner, name, wrapper)
        s.restore.append((owner, name, original, wrapper))

    def step_pre(*_):
        s2 = _state
        if not s2.active or not _on_owner() or is_compiling():
            return None
        if s2.in_optimizer:  # the last optimizer step raised: its phase closes now
            _steptrace.phase_exit()
        _open_step()
        _steptrace.phase_enter(optimizer_id)
        s2.in_optimizer = True
        return None

    def step_post(*_):
        s2 = _state
        if not s2.active or not _on_owner() or is_compiling() or not s2.in_optimizer:
            return None
        s2.in_optimizer = False
        _steptrace.phase_exit()
        _done_with_training_work()
        return None

    def zero_grad_pre(*_):
        # A step whose optimizer step was skipped (GradScaler found inf): done with its training work here.
        if _state.active and _on_owner() and _state.backward_seen and _step_open():
            _done_with_training_work()

    # model.eval() (model.train(False)) on the watched module: an evaluation begins, whatever module object
    # it then runs through (DDP's .module, the uncompiled original): a step done with its training work
    # ends here. An instance attribute over nn.Module.train (eval() calls self.train(False)).
    original_train = model.train

    def train_mode(mode=True):
        if not mode and _state.active and _on_owner() and _driver.ending():
            _driver.end_if_ending()
        return original_train(mode)
    had_train = "train" in vars(model)
    model.train = train_mode
    s.restore.append((model, "train", original_train if had_train else None, train_mode))

    if optimizer is None:
        s.active = True
        return _Loader(loader) if loader is not None else None
    if hasattr(optimizer, "register_step_pre_hook"):  # torch >= 2.0
        s.handles.append(optimizer.register_step_pre_hook(step_pre))
        s.handles.append(optimizer.register_step_post_hook(step_post))
    else:
        original_step = optimizer.step

        def step(*args, **kwargs):
            step_pre()
            try:
                return original_step(*args, **kwargs)
            finally:
                step_post()
        had = "step" in vars(optimizer)
        optimizer.step = step
        s.restore.append((optimizer, "step", original_step if had else None, step))
    original_zero = optimizer.zero_grad
    had_zero = "zero_grad" in vars(optimizer)

    def zero_grad(*args, **kwargs):
        zero_grad_pre()
        return original_zero(*args, **kwargs)
    optimizer.zero_grad = zero_grad
    s.restore.append((optimizer, "zero_grad", original_zero if had_zero else None, zero_grad))
    s.active = True
    return _Loader(loader) if loader is not None else None


def watching():
    """Whether watch()'s hooks are in place."""
    return _state.active


def unwatch():
    """Removes watch()'s hooks; a step it opened is closed."""
    s = _state
    s.active = False
    for h in s.handles:
        h.remove()
    s.handles.clear()
    for owner, name, original, ours in reversed(s.restore):
        current = vars(owner).get(name) if isinstance(owner, type) or hasattr(owner, "__dict__") else None
        inner = getattr(current, "_steptrace_inner", None)  # cross_rank()'s wait measure, over ours
        if current is not ours and inner is not None and inner[0] is ours:
            inner[0] = original
            continue
        if current is not ours:
            # Someone patched it after watch(): theirs stays (it calls ours, which passes through once
            # inactive); said once.
            _steptrace.warn_once("watch.unwatch", f"steptrace.unwatch(): {name} was replaced after watch(); left as it is")
            continue
        if original is None:
            delattr(owner, name)
        else:
            setattr(owner, name, original)
    s.restore.clear()
    s.in_optimizer = False
    if _step_open():  # this thread's (the training thread's when it unwatches)
        try:
            _close_step()
        except Exception:
            _driver.forget()
