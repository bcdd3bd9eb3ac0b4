"""steptrace for a PyTorch Lightning Trainer: one callback.

    import steptrace.lightning
    trainer = Trainer(..., callbacks=[steptrace.lightning.StepTrace(log_path="steps-{rank}.jsonl")])

- a step is one optimizer step: it begins with the first batch of a gradient-accumulation window
  (`on_train_batch_start`) and runs until the next one begins, so `accumulate_grad_batches` batches are
  one step and what Lightning does after the optimizer step (logging, the progress bar's loss read that
  waits for the GPU) is in it: its time is the iteration's. The validation loop and a checkpoint end it
  at their start (`on_validation_start`, `on_save_checkpoint`) and run between steps (the next line's
  `between_steps`);
- phases: `forward` (the batch's start to its `on_before_backward`: `training_step`, and `zero_grad`,
  which Lightning calls inside its closure before the backward), `backward` (`on_before_backward` to
  `on_after_backward`), `optimizer` (`on_before_optimizer_step` to the batch's end: gradient clipping,
  the step);
- tokens and samples: `tokens="auto"` (the default) counts a batch's `input_ids` (a dict batch; padding
  included) and its first dimension; a number (per step) or a function of the batch; None: none;
- settings: keyword arguments of `steptrace.start()` (the program's own `start()` wins: when steptrace
  is already running they are not applied); steptrace is started at `on_fit_start` when not running,
  and then stopped (its end record written) at the end of `fit`;
- `cross_rank=True` (the default): with more than one rank, `steptrace.cross_rank()` at the start of
  `fit` (on every rank: Lightning runs the callback on each), so rank 0's lines carry the slowest rank
  and every rank shares rank 0's `run_id`.

Manual optimization (`automatic_optimization = False`) has no `on_before_optimizer_step` from Lightning
for the program's own `optimizer.step()` calls: each batch is then a step, running until the next batch's. `import steptrace`
never imports Lightning; this module does (`lightning.pytorch`, else `pytorch_lightning`: the package
whose Trainer the program already imported comes first).
"""
import sys

from ._callback_steps import CallbackSteps


def _callback_base():
    order = ("lightning.pytorch", "pytorch_lightning")
    if "pytorch_lightning" in sys.modules and "lightning.pytorch" not in sys.modules:
        order = ("pytorch_lightning", "lightning.pytorch")
    errors = []
    for name in order:
        try:
            module = __import__(name + ".callbacks", fromlist=["Callback"])
            return module.Callback
        except ImportError as e:
            errors.append(f"{name}: {e}")
    raise ImportError("steptrace.lightning needs PyTorch Lightning (lightning or pytorch_lightning): " + "; ".join(errors))


class StepTrace(_callback_base()):
    """A Lightning callback that makes each optimizer step a steptrace step with its phases."""

    def __init__(self, tokens="auto", samples="auto", cross_rank=True, **settings):
        super().__init__()
        self._steps = CallbackSteps(tokens, samples, settings, "steptrace.lightning.StepTrace")
        self._cross_rank = cross_rank
        self._stepping = False  # the open step's optimizer step began (on_before_optimizer_step)

    def on_fit_start(self, trainer, pl_module):
        # The trainer's ranks: Lightning's launcher sets LOCAL_RANK and NODE_RANK, not RANK.
        rank, world = getattr(trainer, "global_rank", None), getattr(trainer, "world_size", None)
        known = (int(rank), int(world)) if isinstance(rank, int) and isinstance(world, int) and world >= 1 else None
        self._steps.begin_training(known, "Lightning's trainer")
        self._wrap_save(trainer)
        if self._cross_rank and getattr(trainer, "world_size", 1) > 1:
            import steptrace
            steptrace.cross_rank()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._steps.begin_batch(batch, "forward")

    def on_before_backward(self, trainer, pl_module, loss):
        self._steps.enter("backward")

    def on_after_backward(self, trainer, pl_module):
        self._steps.exit()

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self._steps.enter("optimizer")
        self._stepping = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._steps.exit()
        if self._stepping or not getattr(pl_module, "automatic_optimization", True):
            self._stepping = False
            self._steps.close_step()

    def on_train_end(self, trainer, pl_module):
        self._restore_save()
        self._steps.close_now()

    # Work that is no step's: the step kept open for the next one ends where it begins (one still inside
    # its accumulation window, before its optimizer step, is not split).
    def on_validation_start(self, trainer, pl_module):
        self._steps.close_if_ending()

    def on_train_epoch_end(self, trainer, pl_module):
        self._steps.close_if_ending()

    def on_save_checkpoint(self, trainer, pl_module, checkpoint):
        self._steps.close_if_ending()

    def _wrap_save(self, trainer):
        """trainer.save_checkpoint ends the kept-open step before it gathers the state (ModelCheckpoint
        calls it; on_save_checkpoint comes after the gathering, and not at all for weights only)."""
        original = getattr(trainer, "save_checkpoint", None)
        if original is None or getattr(original, "_steptrace_wrapped", False):
            return
        steps = self._steps

        def save_checkpoint(*args, **kwargs):
            steps.close_if_ending()
            return original(*args, **kwargs)
        save_checkpoint._steptrace_wrapped = True
        trainer.save_checkpoint = save_checkpoint
        self._saved = (trainer, save_checkpoint)

    def _restore_save(self):
        saved, self._saved = getattr(self, "_saved", None), None
        if saved is not None and vars(saved[0]).get("save_checkpoint") is saved[1]:
            del saved[0].save_checkpoint  # the class's method again (one put over ours stays)

    def on_fit_end(self, trainer, pl_module):
        self._restore_save()
        self._steps.end_training()

    def on_exception(self, trainer, pl_module, exception):
        self._restore_save()
        self._steps.end_training()
