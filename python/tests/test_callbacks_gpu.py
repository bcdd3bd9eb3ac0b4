"""The framework callbacks against the real frameworks, on a GPU (`python tests/test_callbacks_gpu.py
OUT_DIR`; CTest python_gpu runs it through tests/checks/python_check.sh gpu). Each trains a tiny model
in its framework with gradient accumulation (2 batches a step) and an evaluation every 5 steps:

1. PyTorch Lightning: `Trainer(callbacks=[steptrace.lightning.StepTrace(...)])`;
2. Hugging Face transformers: `Trainer(callbacks=[steptrace.transformers.StepTraceCallback(...)])`.

Each must give one line per optimizer step, the phases forward (2 scopes), backward (2) and optimizer
(1) with GPU time on traced steps, the tokens of the step's two batches from their input_ids, the
evaluation between steps, and the end record at the end of fit/train. A framework that is not installed
is reported as skipped (not passed off as tested)."""
import json
import os
import sys
import tempfile

# One GPU: a Hugging Face Trainer started without torchrun on a host of several GPUs would wrap the model
# in DataParallel (its forwards on replica threads). Set before torch initialises CUDA.
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")

import steptrace  # noqa: F401,E402  (before torch, as the other GPU tests)

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runner import run_tests  # noqa: E402
import framework_models  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="steptrace-callbacks-")
VOCAB, SEQ, BATCH, STEPS, ACCUMULATE = 1000, 64, 4, 12, 2


def records(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def check_lines(path, what):
    """The lines of a run made by a callback: problems, as text."""
    recs = records(path)
    steps = [r for r in recs if "event" not in r]
    problems = []
    if len(steps) < STEPS - 1:
        problems.append(f"{what}: {len(steps)} step lines for {STEPS} optimizer steps")
    for l in steps[1:]:
        counts = {k: v.get("count") for k, v in l["phases"].items() if v.get("count")}
        if counts.get("forward") != ACCUMULATE or counts.get("backward") != ACCUMULATE or counts.get("optimizer") != 1:
            problems.append(f"{what}: step {l['global_step']} phases {counts}")
            break
        if l.get("tokens") != ACCUMULATE * BATCH * SEQ:
            problems.append(f"{what}: step {l['global_step']} tokens {l.get('tokens')}, want {ACCUMULATE * BATCH * SEQ}")
            break
    # Their effect on the framework's own code is in no measurement: no upper end claimed, said why.
    estimated = [l for l in steps if isinstance((l.get("overhead") or {}).get("estimated_fraction"), (int, float))]
    unbounded = [l for l in estimated if l["overhead"].get("estimated_fraction_high") is None and
                 "framework's callbacks" in (l.get("null_reasons") or {}).get("overhead.estimated_fraction_high", "")]
    if not estimated or len(unbounded) != len(estimated):
        problems.append(f"{what}: {len(unbounded)} of {len(estimated)} estimated lines without an upper end, said why")
    traced = [l for l in steps if l.get("traced")]
    if not traced or not all((l["phases"]["forward"].get("gpu") or {}).get("busy_ms", 0) > 0 for l in traced[1:]):
        problems.append(f"{what}: traced lines without forward GPU time ({len(traced)} traced)")
    if not any((l.get("between_steps") or {}).get("host_ms", 0) > 0 for l in steps):
        problems.append(f"{what}: no time between steps (the evaluation)")
    if not recs or recs[-1].get("event") != "end":
        problems.append(f"{what}: no end record last")
    print(f"{what}: {len(steps)} lines, {len(traced)} traced, {len(unbounded)} of {len(estimated)} estimated without an upper end; last phases "
          f"{ {k: v.get('count') for k, v in steps[-1]['phases'].items()} if steps else None}")
    return problems


def dataset(n):
    return framework_models.dataset(torch, n, VOCAB, SEQ)


def test_lightning():
    try:
        import steptrace.lightning as stl
    except ImportError as e:
        print(f"SKIPPED lightning: {e}")
        return
    pl = sys.modules.get("lightning.pytorch") or sys.modules.get("pytorch_lightning")
    log = os.path.join(OUT, "lightning.jsonl")
    if os.path.exists(log):
        os.remove(log)
    loader = torch.utils.data.DataLoader(dataset(STEPS * ACCUMULATE * BATCH), batch_size=BATCH)
    val = torch.utils.data.DataLoader(dataset(2 * BATCH), batch_size=BATCH)
    trainer = pl.Trainer(max_steps=STEPS, accumulate_grad_batches=ACCUMULATE, accelerator="gpu", devices=1,
                         val_check_interval=5 * ACCUMULATE, limit_val_batches=2, num_sanity_val_steps=0,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False,
                         callbacks=[stl.StepTrace(log_path=log, summary=False, trace_every=2, line_detail="full")])
    trainer.fit(framework_models.lightning_module(pl, torch, VOCAB), loader, val)
    problems = check_lines(log, "lightning")
    assert not problems, problems


def test_transformers():
    try:
        import steptrace.transformers as sth
        import transformers
    except ImportError as e:
        print(f"SKIPPED transformers: {e}")
        return
    log = os.path.join(OUT, "transformers.jsonl")
    if os.path.exists(log):
        os.remove(log)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=128, n_layer=2, n_head=4)
    model = transformers.GPT2LMHeadModel(config)
    train = [dict(d, labels=d["input_ids"]) for d in dataset(STEPS * ACCUMULATE * BATCH)]
    evals = [dict(d, labels=d["input_ids"]) for d in dataset(2 * BATCH)]
    args = transformers.TrainingArguments(output_dir=os.path.join(OUT, "hf"), max_steps=STEPS,
                                          per_device_train_batch_size=BATCH, per_device_eval_batch_size=BATCH,
                                          gradient_accumulation_steps=ACCUMULATE, eval_strategy="steps",
                                          eval_steps=5, save_strategy="no", report_to=[], logging_steps=1000,
                                          disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=train, eval_dataset=evals,
                                   callbacks=[sth.StepTraceCallback(log_path=log, summary=False, trace_every=2,
                                                                    line_detail="full")])
    trainer.train()
    problems = check_lines(log, "transformers")
    assert not problems, problems


if __name__ == "__main__":
    if not torch.cuda.is_available():
        print("test_callbacks_gpu: no GPU")
        sys.exit(1)
    os.makedirs(OUT, exist_ok=True)
    sys.exit(run_tests(dict(globals()), "test_callbacks_gpu"))
