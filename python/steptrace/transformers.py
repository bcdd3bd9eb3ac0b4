"""steptrace for a Hugging Face Trainer: one callback.

    import steptrace.transformers
    trainer = Trainer(..., callbacks=[steptrace.transformers.StepTraceCallback(log_path="steps-{rank}.jsonl")])

- a step is one optimizer step: from `on_step_begin` (the first micro-batch of a gradient-accumulation
  window) to the next one's, so its time is the iteration's (the logging after `on_step_end`, whose loss
  read waits for the GPU, is in it); a step the Trainer will evaluate or save after (`control.should_save`,
  `should_evaluate` at `on_step_end`) ends there, and an evaluation forward of the model ends it too:
  evaluation and checkpoints run between steps (the next line's `between_steps`);
- phases: `forward` and `backward` from hooks on the model the Trainer trains (`steptrace.watch(model)`
  without an optimizer: phases only; forward hooks on the model, the backward call wrapped), and
  `optimizer` from `on_pre_optimizer_step` to `on_optimizer_step`;
- tokens and samples: `tokens="auto"` (the default) counts the `input_ids` of each training forward of
  the step (padding included; a forward pre-hook reading the model's arguments), and samples their first
  dimension; a number (per step); None: none;
- settings: keyword arguments of `steptrace.start()` (the program's own `start()` wins); steptrace is
  started at `on_train_begin` when not running, and stopped (its end record written) at `on_train_end`;
- `cross_rank=True` (the default): with more than one process, `steptrace.cross_rank()` at
  `on_train_begin`, on every rank.

`import steptrace` never imports transformers; this module does.
"""
from ._callback_steps import CallbackSteps

try:
    from transformers import TrainerCallback
except ImportError as e:  # said plainly: the module exists only for programs that have transformers
    raise ImportError(f"steptrace.transformers needs Hugging Face transformers: {e}") from e


class StepTraceCallback(TrainerCallback):
    """A Hugging Face Trainer callback that makes each optimizer step a steptrace step with its phases."""

    def __init__(self, tokens="auto", samples="auto", cross_rank=True, **settings):
        if callable(tokens) or callable(samples):
            raise TypeError("steptrace.transformers.StepTraceCallback(tokens=, samples=): 'auto', a number per "
                            "step, or None (the callback does not see the batches)")
        self._steps = CallbackSteps(tokens, samples, settings, "steptrace.transformers.StepTraceCallback")
        self._cross_rank = cross_rank
        self._count_handle = None
        self._watching = False

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        import steptrace
        from .watch import watching
        self._teardown()  # what a train() that raised left (transformers has no on_exception)
        rank, world = getattr(args, "process_index", None), getattr(args, "world_size", None)
        known = (int(rank), int(world)) if isinstance(rank, int) and isinstance(world, int) and world >= 1 else None
        self._steps.begin_training(known, "the Trainer's arguments")
        if self._cross_rank and getattr(args, "world_size", 1) > 1:
            steptrace.cross_rank()
        if model is not None and steptrace.is_running():
            if watching():
                _steptrace_warn("the program already runs steptrace.watch(): its hooks are kept, the callback adds "
                                "the optimizer phase and the steps only")
            else:
                steptrace.watch(model)  # forward and backward phases inside the steps opened here
                self._watching = True
            if self._steps.tokens == "auto":
                self._count_handle = self._count_tokens(model)

    def _teardown(self):
        import steptrace
        if self._count_handle is not None:
            self._count_handle.remove()
            self._count_handle = None
        if self._watching:
            steptrace.unwatch()
            self._watching = False

    def _count_tokens(self, model):
        import torch
        from .watch import _compiling_check
        steps = self._steps
        is_compiling = _compiling_check(torch)

        def count(module, args, kwargs):
            # Not inside a region torch.compile traces (no graph break), not on another thread (DataParallel's
            # replicas), only training forwards of an open step.
            if is_compiling() or not steps.open or not module.training or not torch.is_grad_enabled():
                return None
            ids = kwargs.get("input_ids", args[0] if args else None)
            if hasattr(ids, "numel"):
                steps.count_batch({"input_ids": ids})
            return None
        try:
            return model.register_forward_pre_hook(count, with_kwargs=True)  # torch >= 2.0
        except TypeError:
            return None

    def on_step_begin(self, args, state, control, **kwargs):
        self._steps.open_step()

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self._steps.enter("optimizer")

    def on_optimizer_step(self, args, state, control, **kwargs):
        self._steps.exit()

    def on_step_end(self, args, state, control, **kwargs):
        self._steps.close_step()
        # The Trainer's flow callback (first) has said whether a save or an evaluation follows: not the step's.
        if getattr(control, "should_save", False) or getattr(control, "should_evaluate", False):
            self._steps.close_now()

    def on_train_end(self, args, state, control, **kwargs):
        self._teardown()
        self._steps.end_training()


def _steptrace_warn(message):
    from . import _steptrace
    _steptrace.warn_once("transformers.watch", "steptrace.transformers.StepTraceCallback: " + message)

