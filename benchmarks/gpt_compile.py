#!/usr/bin/env python3
"""A torch.compile GPT-2 training script, timed with and without steptrace in one process.

    gpt_compile.py [--rounds 3] [--first-round 0] [--warmup 40] [--steps 200] [--layers 12] [--lines-dir DIR]
                   [--modes off,default,full] [--eval-every 100] [--eval-batches 10] [--device cuda] [--interleave G]

The shape of the program issue #48 measured: GPT-2 124M (12 layers, 12 heads, d_model 768, vocab 50 304,
1 024 tokens of context; causal attention through scaled_dot_product_attention), torch.compile, bf16
autocast, fused AdamW, gradient accumulation of 4 micro-batches of 16 x 1 024 tokens per optimizer step
(65 536 tokens), loss.item() at the end of each step (as a loop that logs its loss), and an evaluation of
10 batches under no_grad every 100 steps, between steps. Batches come from a pinned pool, copied
non_blocking (the `input` phase).

The model is compiled once; then --rounds rounds run one block per mode (in an order shuffled per round,
seeded by the round), each block --warmup steps then --steps timed ones (each block counts its evaluations
from its own step 0). Modes:
  off      steptrace is imported but not started; the scopes are no-op stand-ins (the same `with`s)
  default  steptrace.start(log_path=...) only: what a user gets without a setting
  full     trace_every=1 (every step traced)
  default_full  the defaults with full lines (line_detail=full: the overhead's parts on every line)
  detach   untraced_cupti=detach (the budget decides the interval, CUPTI detached between traces)
  keep     untraced_cupti=keep (the budget decides the interval, CUPTI attached between traces)
  nomarkers stream_markers=false
  watch    the defaults with steptrace.watch(compiled model, optimizer, tokens=...) and no scope in the
           loop: the one-line use (its step runs from one step's first training work to the next's)
  profiler steptrace not started; torch.profiler(CPU+CUDA activities, schedule(wait=48, warmup=1,
           active=1)) with a trace written per profiled step into LINES_DIR/<block>_profiler/, its
           prof.step() inside each step's timing (what a user of it pays, exports included). Only with
           `off` in one process: Kineto keeps CUPTI subscribed once it has profiled, so a steptrace block
           after it would run without CUPTI; run it as a second process beside the steptrace one
steptrace is started before a block and stopped after it. A step's time is time.perf_counter() around
the step (the evaluation is outside it: it runs between steps).

Under torchrun (WORLD_SIZE > 1) the model is wrapped in DistributedDataParallel (NCCL) before compiling,
each rank on cuda:LOCAL_RANK, the first accumulate-1 micro-batches under no_sync() (gradients all-reduced
once per optimizer step, in the last backward), and every rank runs the same blocks in the same order;
blocks and lines are named per rank (workload gpt_compile_ddp_rank<R>).

Prints per block:
  block workload=gpt_compile round=R mode=M steps=S mean_ms=.. median_ms=.. p10_ms=.. p90_ms=.. lines=PATH|- wall_s=..
and beside each block's lines, PATH.times.json: {"first_step": warmup, "ms": [each timed step's time]}.

--interleave G: the in-run comparison (benchmarks/interleave.py). In each steptrace block (scope modes
and watch) the warm-up steps run with steptrace's scopes, the timed ones alternate G with them and G with the
off stand-ins, steptrace started throughout (the first group on in even rounds, off in odd ones); the
step after an evaluation is left out on both sides. In the watch mode, watch()'s hooks are removed
(steptrace.unwatch(), which ends the step it kept open) before an off group's first step and put back
before an on group's, outside the steps' timing; each group's first step is left out on both sides. Adds per block (its `on` list in PATH.times.json):
  interleave workload=.. round=R mode=M group=G on_steps=.. off_steps=.. traced=.. off_groups_left_out=..
             pairs=.. on_mean_ms=.. off_mean_ms=.. cost_by_means=..% cost_by_medians=..% pair_mean=..%
             pair_median=..% pair_sd=..% pair_se=..% pair_max=..% pairs_over=N null_pairs=N null_sd=..%
             null_max=..% null_over=N lines_matched=.. estimate_mean=..% estimate_high_mean=..% high_unbounded_lines=N
(pairs: each on group's mean less the mean of the kept off groups beside it, over the off mean - a
traced group has none and forms no pair; pair_se widened for neighbours sharing an off group;
off groups beside a traced step left out (CUPTI attached there, its records on through an off group
after a traced step that ended its on group: the benchmark's); pairs_over: pairs over 0.3 %; null_*: each kept off group against
the off groups two away, the program's own noise on a pair (interleave.py);
estimate_mean: the timed on steps' lines; estimate_high_mean: their `estimated_fraction_high` where a
number, high_unbounded_lines: those with an estimate and none - the markers' cost not measured yet).
benchmarks/alternate_summary.py pairs each block with its round's off block (the table of README "What it
costs"). --device cpu (with --layers 1 and small sizes) only checks the script on a machine without a GPU.
"""
import argparse
import json
import os
import random
import statistics
import sys
import time

import interleave  # beside this file: the in-run comparison (--interleave)

MODES = {  # each block's start() settings; None: not started
    "off": None,
    "default": {},
    "full": {"trace_every": 1, "line_detail": "full"},
    "default_full": {"line_detail": "full"},  # the defaults, full lines: the overhead's parts, the interval's why
    "detach": {"untraced_cupti": "detach"},
    "keep": {"untraced_cupti": "keep"},
    "nomarkers": {"stream_markers": False},
    "profiler": None,  # torch.profiler instead of steptrace (below)
    "watch": {},       # the defaults, phases and steps from steptrace.watch()'s hooks, no scope in the loop
}
# The peer, as its users run it always-on: torch.profiler (Kineto) with a periodic schedule, one step in
# PROFILE_EVERY profiled (wait, warmup 1, active 1: PyTorch's recommended shape), each profiled step's
# trace written by tensorboard_trace_handler.
PROFILE_EVERY = 50


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--first-round", type=int, default=0, help="the first round's number (its order's seed): a run split over calls")
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--dmodel", type=int, default=768)
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--accumulate", type=int, default=4)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--eval-batches", type=int, default=10)
    p.add_argument("--modes", default="off,default,full")
    p.add_argument("--lines-dir", default=".")
    p.add_argument("--device", default="cuda")
    p.add_argument("--no-compile", action="store_true", help="eager (checks the script where compiling cannot run)")
    p.add_argument("--interleave", type=int, default=0, metavar="G",
                   help="the in-run comparison: each steptrace block's timed steps alternate G with its scopes, G without")
    a = p.parse_args(argv)
    a.modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in a.modes if m not in MODES]
    if bad or not a.modes:
        p.error(f"--modes: choose from {', '.join(MODES)} (got {a.modes})")
    if "profiler" in a.modes and any(MODES[m] is not None for m in a.modes):
        # Kineto keeps CUPTI subscribed after its profiler exits: every later steptrace block in the process
        # would run without CUPTI (it says so and falls back to host timings). Measured on an H200 (session
        # 63): the profiler's blocks go in a process of their own, beside the off blocks they pair with.
        p.error("--modes: profiler runs in a process of its own, with off only (Kineto keeps CUPTI after it)")
    if a.interleave and ("profiler" in a.modes or a.interleave < 1):
        p.error("--interleave G >= 1, with scope modes or watch only (the profiler is not switched per step)")
    if a.interleave and "watch" in a.modes and a.interleave < 3:
        p.error("--interleave G >= 3 with watch (each group's first step, the hooks' switch, is left out on both sides)")
    if a.rounds < 1 or a.steps < 1 or a.warmup < 0 or a.accumulate < 1:
        p.error("--rounds >= 1, --steps >= 1, --warmup >= 0, --accumulate >= 1")
    return a


def build(a, torch):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(a.dmodel)
            self.qkv = nn.Linear(a.dmodel, 3 * a.dmodel)
            self.proj = nn.Linear(a.dmodel, a.dmodel)
            self.ln2 = nn.LayerNorm(a.dmodel)
            self.fc = nn.Linear(a.dmodel, 4 * a.dmodel)
            self.out = nn.Linear(4 * a.dmodel, a.dmodel)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, a.heads, c // a.heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(a.vocab, a.dmodel)
            self.pos = nn.Embedding(a.seq, a.dmodel)
            self.blocks = nn.ModuleList(Block() for _ in range(a.layers))
            self.ln = nn.LayerNorm(a.dmodel)
            self.head = nn.Linear(a.dmodel, a.vocab, bias=False)
            self.head.weight = self.tok.weight  # tied, as GPT-2

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.tok(idx) + self.pos(pos)
            for blk in self.blocks:
                x = blk(x)
            logits = self.head(self.ln(x))
            return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())

    torch.manual_seed(0)
    model = GPT().to(a.device)
    cuda = a.device.startswith("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, **({"fused": True} if cuda else {}))
    wrapped = model
    if a.world_size > 1:
        wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=[a.local_rank])
    compiled = wrapped if a.no_compile else torch.compile(wrapped)
    g = torch.Generator().manual_seed(0)
    pool = [torch.randint(0, a.vocab, (a.micro_batch, a.seq + 1), generator=g) for _ in range(8)]
    if cuda:
        pool = [b.pin_memory() for b in pool]
    params = sum(p.numel() for p in model.parameters())
    # PaLM's model FLOPs per token (Chowdhery et al. 2022, appendix B): 6 N + 12 L H Q T.
    flops_per_token = 6 * params + 12 * a.layers * a.heads * (a.dmodel // a.heads) * a.seq
    return model, compiled, opt, pool, flops_per_token


def profiler_for(a, torch, trace_dir):
    """torch.profiler as its users leave it on: 1 step in PROFILE_EVERY, traces written."""
    from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if a.device.startswith("cuda") else [])
    os.makedirs(trace_dir, exist_ok=True)
    return profile(activities=activities, schedule=schedule(wait=PROFILE_EVERY - 2, warmup=1, active=1),
                   on_trace_ready=tensorboard_trace_handler(trace_dir))


def run_block(a, torch, model, compiled, opt, pool, scopes, after_step=None, switch=None, off=None, on_switch=None):
    """warmup + steps steps; returns the timed steps' times (ms) and their wall time (s). `after_step`:
    called at each step's end, inside its timing (torch.profiler's prof.step()). `switch` (--interleave):
    per timed step, True for `scopes`, False for the `off` ones (the warm-up steps take `scopes`);
    `on_switch(on)`: called before a timed step whose side differs from the step's before it, outside
    its timing (watch's hooks put back or removed)."""
    tokens = a.micro_batch * a.seq * a.accumulate
    autocast = torch.autocast("cuda" if a.device.startswith("cuda") else "cpu", dtype=torch.bfloat16)
    times = []
    wall0 = time.perf_counter()
    n = 0
    import contextlib
    ddp = a.world_size > 1
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            wall0 = time.perf_counter()
        step_scope, phases = off if switch is not None and s >= a.warmup and not switch[s - a.warmup] else scopes
        if on_switch is not None and switch is not None and s >= a.warmup:
            side, before = switch[s - a.warmup], switch[s - a.warmup - 1] if s > a.warmup else True
            if side != before:
                on_switch(side)
        t0 = time.perf_counter()
        with step_scope(tokens=tokens):
            for micro in range(a.accumulate):
                # DDP: gradients all-reduced once per optimizer step, in the last micro-batch's backward.
                sync = contextlib.nullcontext() if not ddp or micro == a.accumulate - 1 else getattr(compiled, "_orig_mod", compiled).no_sync()
                with phases["input"]:
                    batch = pool[n % len(pool)].to(a.device, non_blocking=True)
                    n += 1
                with sync:
                    with phases["forward"]:
                        with autocast:
                            loss = compiled(batch[:, :-1], batch[:, 1:]) / a.accumulate
                    with phases["backward"]:
                        loss.backward()
            with phases["optimizer"]:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad(set_to_none=True)
            loss.item()
        if after_step is not None:
            after_step()
        if s >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
        if a.eval_every and (s + 1) % a.eval_every == 0:  # between steps: no step scope is open
            compiled.eval()
            with torch.no_grad(), autocast:
                for i in range(a.eval_batches):
                    batch = pool[i % len(pool)].to(a.device, non_blocking=True)
                    compiled(batch[:, :-1], batch[:, 1:]).item()
            compiled.train()
    return times, time.perf_counter() - wall0


def eval_follow(a, n, mode=None):
    """The timed steps right after an evaluation (each meets the evaluation's caches): --interleave leaves
    them out on both sides; in the watch mode each group's first step too (the hooks' switch)."""
    skip = [i for i in range(n) if a.eval_every and (a.warmup + i) % a.eval_every == 0]
    if mode == "watch" and a.interleave:
        skip = sorted(set(skip) | set(range(0, n, a.interleave)))
    return skip


def interleaved(a, workload, r, mode, lines, times, switch):
    """--interleave: the block's on steps against its off steps (benchmarks/interleave.py), beside the lines'
    mean estimate over the timed on steps, its high end's mean where the lines give one and how many gave
    none (the markers' cost not measured yet)."""
    from default_cost_summary import read_lines
    steps, _ = read_lines(lines) if lines != "-" else (None, None)
    traced = interleave.traced_steps(steps, switch)
    d = interleave.compare(times, switch, a.interleave, skip=eval_follow(a, len(times), mode), traced=traced or ())
    est = interleave.estimate_mean(steps, switch)
    high, unbounded = interleave.estimate_high(steps, switch)
    return (f"interleave workload={workload} round={r} mode={mode} group={a.interleave} {interleave.describe(d)} "
            f"lines_matched={traced is not None} estimate_mean={'-' if est is None else f'{100 * est:.4f}%'} "
            f"estimate_high_mean={'-' if high is None else f'{100 * high:.4f}%'} high_unbounded_lines={unbounded}")


def main(argv):
    a = parse(argv)
    have = sorted(k for k in os.environ if k.startswith("STEPTRACE_"))
    if have:
        print(f"gpt_compile: each block sets its own settings; the environment has {have}", file=sys.stderr)
        return 2
    import torch
    a.world_size = int(os.environ.get("WORLD_SIZE", "1"))
    a.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    a.rank = int(os.environ.get("RANK", "0"))
    if a.world_size > 1:
        if not a.device.startswith("cuda"):
            print("gpt_compile: DDP (WORLD_SIZE > 1) needs --device cuda", file=sys.stderr)
            return 1
        a.device = f"cuda:{a.local_rank}"
        torch.cuda.set_device(a.local_rank)
        torch.distributed.init_process_group("nccl", device_id=torch.device(a.device))
    import steptrace
    from python_gpt import _NoScope, quantile, start_block  # beside this file: one way to time and start a block

    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpt_compile: no CUDA device (--device cpu only checks the script)", file=sys.stderr)
        return 1
    model, compiled, opt, pool, flops_per_token = build(a, torch)
    none = _NoScope()
    off = (lambda tokens=None: none, {k: none for k in ("input", "forward", "backward", "optimizer")})
    # Compile (train and eval graphs) before any block: torch.compile's first steps are not timed.
    t0 = time.perf_counter()
    saved = (a.warmup, a.steps)
    a.warmup, a.steps = 3, 1
    run_block(a, torch, model, compiled, opt, pool, off)
    if a.eval_every:
        compiled.eval()
        with torch.no_grad(), torch.autocast("cuda" if a.device.startswith("cuda") else "cpu", dtype=torch.bfloat16):
            compiled(pool[0][:, :-1].to(a.device), pool[0][:, 1:].to(a.device)).item()
        compiled.train()
    a.warmup, a.steps = saved
    print(f"compiled in {time.perf_counter() - t0:.1f} s; flops_per_token {flops_per_token:.4g}", flush=True)
    os.makedirs(a.lines_dir, exist_ok=True)
    workload = f"gpt_compile_ddp_rank{a.rank}" if a.world_size > 1 else "gpt_compile"
    for r in range(a.first_round, a.first_round + a.rounds):
        order = list(a.modes)
        random.Random(r + 48).shuffle(order)
        for mode in order:
            settings = MODES[mode]
            lines = start_block(steptrace, a.lines_dir, f"{workload}_{r}_{mode}", settings, flops_per_token=flops_per_token)
            scopes = off
            if mode == "watch":
                steptrace.watch(compiled, opt, tokens=a.micro_batch * a.seq * a.accumulate)
            elif settings is not None:
                scopes = (steptrace.step, {k: steptrace.phase(k) for k in ("input", "forward", "backward", "optimizer")})
            prof = profiler_for(a, torch, os.path.join(a.lines_dir, f"{workload}_{r}_profiler")) if mode == "profiler" else None
            if prof is not None:
                prof.__enter__()
            switch = interleave.schedule(a.steps, a.interleave, on_first=r % 2 == 0) \
                if a.interleave and settings is not None else None
            on_switch = None
            if mode == "watch" and switch is not None:
                def on_switch(on):
                    if on:
                        steptrace.watch(compiled, opt, tokens=a.micro_batch * a.seq * a.accumulate)
                    else:
                        steptrace.unwatch()
            times, wall_s = run_block(a, torch, model, compiled, opt, pool, scopes,
                                      after_step=prof.step if prof is not None else None, switch=switch, off=off,
                                      on_switch=on_switch)
            if prof is not None:
                prof.__exit__(None, None, None)
            if a.device.startswith("cuda"):
                torch.cuda.synchronize()
            if mode == "watch":
                steptrace.unwatch()
            if settings is not None:
                steptrace.stop()
            if lines != "-":  # the program's own clock per step, beside its lines (step warmup + i)
                with open(lines + ".times.json", "w") as f:
                    json.dump({"first_step": a.warmup, "ms": times,
                               **({"on": switch, "group": a.interleave, "skip": eval_follow(a, len(times), mode)}
                                  if switch else {})}, f)
            print(f"block workload={workload} round={r} mode={mode} steps={len(times)} "
                  f"mean_ms={statistics.fmean(times):.4f} median_ms={statistics.median(times):.4f} "
                  f"p10_ms={quantile(sorted(times), 0.1):.4f} p90_ms={quantile(sorted(times), 0.9):.4f} lines={lines} "
                  f"wall_s={wall_s:.3f}", flush=True)
            if switch is not None:
                print(interleaved(a, workload, r, mode, lines, times, switch), flush=True)
    if a.world_size > 1:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
