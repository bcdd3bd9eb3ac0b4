#!/usr/bin/env python3
"""What steptrace says a PyTorch step takes, against the program's own per-iteration clock (issue #59).

    iteration_truth.py gpt [--steps 80] [--warmup 15] [--out DIR]          one process, or under torchrun (DDP)
    iteration_truth.py lightning --out DIR                                 Lightning, Trainer(devices=2, strategy="ddp")
    iteration_truth.py hf --out DIR                                        under torchrun: the Hugging Face Trainer

gpt: a torch.compile GPT (bf16 autocast, fused AdamW, gradient accumulation of 4 micro-batches, an
evaluation every 25 iterations between steps; batches from a plain function: pinned slices copied
non_blocking, not a DataLoader). Its own clock runs from the top of one iteration to the top of the next
(the evaluation left out, as the scripts' own timers). Blocks, each with its own log:
  hand        steptrace.step() around the iteration, record("loss", loss) inside, loss.item() after
  watch       steptrace.watch(model, opt), loss.item() after opt.step() (the README's one-line path)
  watch_every steptrace.watch, loss.item() every 4 iterations
  watch_none  steptrace.watch, no read at all
  watch_rank0 (DDP) steptrace.watch, loss.item() on rank 0 only
Under torchrun the model is DDP-wrapped (NCCL), no_sync() for all but the last micro-batch.
lightning / hf: a tiny model in the framework with the README's callback and log "<x>-{rank}.jsonl"; the
program's clock is a callback of its own reading time at each optimizer step's first batch.

Each block prints one line: own clock and steptrace medians and means (steady state: the warm-up and the
last step left out), their ratio, tokens/s and MFU both ways, the ranks the logs say, and the number of
lines whose GPU busy time exceeds its window (max(step_time_ms, the GPU span)) or that carry invariant
exclusions. Lines go to --out.
"""
import argparse
import contextlib
import glob
import json
import os
import statistics
import sys
import time

H200_BF16_DENSE = 989.5e12  # NVIDIA H200 datasheet (2024): BF16 Tensor Core 1979 TFLOPS with sparsity; dense = /2


def lines_of(path):
    out = []
    for text in open(path):
        try:
            r = json.loads(text)
        except ValueError:
            continue
        if "event" not in r:
            out.append(r)
    return out


def window_problems(lines):
    """(lines whose GPU busy time exceeds their window or that carry invariant exclusions, lines whose
    busy time exceeds the step's time: work of the step that ran past its host window)."""
    bad = over = 0
    for l in lines:
        g = l.get("gpu") or {}
        busy = g.get("busy_ms")
        if isinstance(busy, (int, float)):
            window = g.get("window_ms") if isinstance(g.get("window_ms"), (int, float)) else l["step_time_ms"]
            bad += busy > window * 1.001 + 0.02 or (g.get("invariant_exclusions") or 0) > 0
            over += busy > l["step_time_ms"] * 1.001 + 0.02
    return bad, over


def report(name, own_s, lines, tokens, flops_per_token, rank, world):
    """own_s[i] is the program's own time of the iteration lines[i] is the line of."""
    own_ms = [x * 1e3 for x in own_s]
    st = [l["step_time_ms"] for l in lines]
    if not own_ms or not st:
        print(f"block {name} rank={rank}: no steady-state lines ({len(lines)} lines)", flush=True)
        return
    mfu = [l.get("estimated_mfu") for l in lines]
    mfu = [m for m in mfu if isinstance(m, (int, float))]
    tps = [l.get("tokens_per_second") for l in lines]
    tps = [t for t in tps if isinstance(t, (int, float))]
    own_tps = tokens / (statistics.median(own_ms) / 1e3)
    own_mfu = own_tps * world * flops_per_token / (H200_BF16_DENSE * world) if flops_per_token else None
    ranks = sorted({l.get("rank") for l in lines if "rank" in l})
    print(f"block {name} rank={rank} lines={len(lines)} own_median_ms={statistics.median(own_ms):.3f} "
          f"steptrace_median_ms={statistics.median(st):.3f} ratio_median={statistics.median(st) / statistics.median(own_ms):.4f} "
          f"own_mean_ms={statistics.fmean(own_ms):.3f} steptrace_mean_ms={statistics.fmean(st):.3f} "
          f"ratio_mean={statistics.fmean(st) / statistics.fmean(own_ms):.4f} "
          f"tps_steptrace={statistics.median(tps) if tps else None} tps_own={own_tps:.0f} "
          f"mfu_steptrace={statistics.median(mfu) if mfu else None} mfu_own={own_mfu} ranks_in_lines={ranks} "
          f"window_problems={window_problems(lines)[0]} busy_over_step_time={window_problems(lines)[1]}", flush=True)


def gpt(a):
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gpt_compile
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if world > 1:
        torch.cuda.set_device(local)
        torch.distributed.init_process_group("nccl", device_id=torch.device(f"cuda:{local}"))
    rank = torch.distributed.get_rank() if world > 1 else 0
    import steptrace
    g = gpt_compile.parse(["--layers", str(a.layers), "--dmodel", "512", "--heads", "8", "--seq", "512",
                           "--micro-batch", "8", "--accumulate", "4"])
    g.world_size, g.local_rank, g.device = world, local, f"cuda:{local}"
    model, compiled, opt, pool, flops_per_token = gpt_compile.build(g, torch)
    tokens = g.micro_batch * g.seq * g.accumulate
    autocast = torch.autocast("cuda", dtype=torch.bfloat16)
    n = [0]

    def get_batch():
        b = pool[n[0] % len(pool)].to(g.device, non_blocking=True)
        n[0] += 1
        return b

    def evaluate():
        compiled.eval()
        with torch.no_grad(), autocast:
            for i in range(4):
                b = get_batch()
                compiled(b[:, :-1], b[:, 1:]).item()
        compiled.train()

    def iteration(read, record=False):
        for micro in range(g.accumulate):
            # DDP: gradients all-reduced once per optimizer step, in the last micro-batch's backward.
            last = world == 1 or micro == g.accumulate - 1
            with contextlib.nullcontext() if last else compiled._orig_mod.no_sync():
                b = get_batch()
                with autocast:
                    loss = compiled(b[:, :-1], b[:, 1:]) / g.accumulate
                loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if record:
            steptrace.record("loss", loss)
        if read:
            loss.item()

    for _ in range(3):  # compile the train and eval graphs before any block
        iteration(True)
    evaluate()
    torch.cuda.synchronize()
    blocks = a.blocks.split(",") if a.blocks else ["hand", "watch", "watch_every", "watch_none"] + (["watch_rank0"] if world > 1 else [])
    for name in blocks:
        log = os.path.join(a.out, f"gpt-{name}-{{rank}}.jsonl")
        if os.path.exists(log.replace("{rank}", str(rank))):  # this rank's own only: the other may have begun
            os.remove(log.replace("{rank}", str(rank)))
        steptrace.start(log_path=log, summary=False, tokens_per_step=tokens, flops_per_token=flops_per_token)
        if name != "hand":
            steptrace.watch(compiled, opt)
        own, top = {}, None  # iteration -> its time on the program's clock (top to the next top)
        total = a.warmup + a.steps
        for it in range(total):
            t0 = time.perf_counter()
            if top is not None:
                own[it - 1] = t0 - top
            top = t0
            if name == "hand":
                with steptrace.step():
                    iteration(True, record=True)
            else:
                read = {"watch": True, "watch_every": it % 4 == 0, "watch_none": False,
                        "watch_rank0": rank == 0}[name]
                iteration(read)
            if (it + 1) % 25 == 0:  # between steps, off the program's clock
                evaluate()
                top = None
        torch.cuda.synchronize()
        steptrace.stop()
        steptrace.unwatch()
        if world > 1:
            torch.distributed.barrier()
        lines = lines_of(log.replace("{rank}", str(rank)))
        # Steady state: after the warm-up; iterations an evaluation followed have no time on the
        # program's clock (its timer is reset after one) and are left out, as is the last.
        keep = [l for l in lines if l["global_step"] >= a.warmup and l["global_step"] in own]
        report(f"gpt_{name}", [own[l["global_step"]] for l in keep], keep, tokens, flops_per_token, rank, world)
        print(f"logs {name} rank={rank}: {sorted(os.path.basename(p) for p in glob.glob(log.replace('{rank}', '*')))}",
              flush=True)
    if world > 1:
        torch.distributed.destroy_process_group()


class _Tiny:
    @staticmethod
    def make(torch, vocab=1000, d=256):
        return torch.nn.Sequential(torch.nn.Embedding(vocab, d), torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                   torch.nn.Linear(4 * d, vocab))


def lightning(a):
    import torch
    import steptrace.lightning as stl
    pl = sys.modules.get("lightning.pytorch") or sys.modules.get("pytorch_lightning")
    vocab, seq, batch, accumulate, steps = 1000, 128, 16, 2, 60
    own = []

    class Clock(pl.Callback):  # the program's own per-iteration clock: each optimizer step's first batch
        def on_train_batch_start(self, trainer, module, b, i):
            if i % accumulate == 0:
                own.append(time.perf_counter())

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _Tiny.make(torch)

        def training_step(self, b, i):
            ids = b["input_ids"]
            loss = torch.nn.functional.cross_entropy(self.net(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
            self.log("loss", loss, prog_bar=True)  # the progress bar reads it
            return loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    g = torch.Generator().manual_seed(0)
    data = [{"input_ids": torch.randint(0, vocab, (seq,), generator=g)} for _ in range(steps * accumulate * batch)]
    loader = torch.utils.data.DataLoader(data, batch_size=batch)
    log = os.path.join(a.out, "lit-{rank}.jsonl")
    trainer = pl.Trainer(max_steps=steps, accumulate_grad_batches=accumulate, accelerator="gpu", devices=2,
                         strategy="ddp", logger=False, enable_checkpointing=False, enable_model_summary=False,
                         callbacks=[Clock(), stl.StepTrace(log_path=log, summary=False)])
    trainer.fit(Module(), loader)
    rank = trainer.global_rank
    intervals = [b - a_ for a_, b in zip(own, own[1:])]
    lines = lines_of(log.replace("{rank}", str(rank)))
    n = min(len(intervals), len(lines))  # step i: intervals[i] on the program's clock, lines[i] steptrace's
    report("lightning", intervals[5:n], lines[5:n], seq * batch * accumulate, None, rank, trainer.world_size)
    print(f"logs lightning rank={rank}: {sorted(os.path.basename(p) for p in glob.glob(os.path.join(a.out, 'lit-*')))}",
          flush=True)


def hf(a):
    import torch
    import transformers
    import steptrace.transformers as sth
    vocab, seq, batch, accumulate, steps = 1000, 128, 8, 2, 60
    own = []

    class Clock(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            own.append(time.perf_counter())

    config = transformers.GPT2Config(vocab_size=vocab, n_positions=seq, n_embd=256, n_layer=4, n_head=4)
    model = transformers.GPT2LMHeadModel(config)
    g = torch.Generator().manual_seed(0)
    train = [{"input_ids": (x := torch.randint(0, vocab, (seq,), generator=g)), "labels": x}
             for _ in range(steps * accumulate * batch * 2)]
    log = os.path.join(a.out, "hf-{rank}.jsonl")
    args = transformers.TrainingArguments(output_dir=os.path.join(a.out, "hf"), max_steps=steps,
                                          per_device_train_batch_size=batch, gradient_accumulation_steps=accumulate,
                                          save_strategy="no", report_to=[], logging_steps=1, disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=train,
                                   callbacks=[Clock(), sth.StepTraceCallback(log_path=log, summary=False)])
    trainer.train()
    rank = args.process_index
    intervals = [b - a_ for a_, b in zip(own, own[1:])]
    lines = lines_of(log.replace("{rank}", str(rank)))
    n = min(len(intervals), len(lines))
    report("hf", intervals[5:n], lines[5:n], seq * batch * accumulate, None, rank, args.world_size)
    print(f"logs hf rank={rank}: {sorted(os.path.basename(p) for p in glob.glob(os.path.join(a.out, 'hf-*')))}",
          flush=True)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("gpt", "lightning", "hf"))
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--warmup", type=int, default=15)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--out", default=".")
    p.add_argument("--blocks", default="", help="gpt: the blocks to run (default: all)")
    a = p.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    {"gpt": gpt, "lightning": lightning, "hf": hf}[a.what](a)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
