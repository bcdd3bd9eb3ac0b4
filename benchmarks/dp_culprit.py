"""Who holds the step back under DDP / FSDP, against a rank slowed on purpose (2 GPUs, torchrun).

    torchrun --nproc_per_node 2 benchmarks/dp_culprit.py --out DIR [--scenarios a,b,...] [--steps 120]
    python3 benchmarks/dp_culprit.py --summarize DIR

One process per rank runs every scenario in turn on one torch.compile'd GPT under DDP (4 micro-batches,
`no_sync()` for the first 3), each scenario its own steptrace run (the defaults: compact lines, the
overhead budget's trace schedule; cross_rank() every 10 steps): the planted rank sleeps 5 ms in each of
its 4 batch fetches (+20 ms of its own work a step). Scenarios (name: instrumentation, slowed rank,
loss read):
  hand_r1, hand_r0    phases by hand (`input` around the fetch), rank 1 / rank 0 slowed, no read
  watch_r1, watch_r0  steptrace.watch (the fetch untagged), rank 1 / rank 0 slowed, no read
  watch_read0         watch, nothing slowed, rank 0 reads loss.item() and prints every iteration
  watch_none          watch, nothing slowed, no read
  hand_none           by hand, nothing slowed, no read
  hand_read_r1        by hand, rank 1 slowed, every rank reads loss.item() every iteration
  fsdp_r1, fsdp_r0    FSDP (fully_shard per block, eager) with watch, rank 1 / rank 0 slowed
  plain_none, plain_read0  no steptrace: the program measures the same end-of-backward wait with its own
                      CUDA events (the control: is a wait in an unplanted run the job's or steptrace's?)
Each rank also keeps the program's own clock (time.perf_counter per iteration) in DIR/clock-NAME-RANK.json.
--summarize prints, per scenario, what rank 0's views say from step 20 on (share naming the slowed
rank, culprit phases, balanced, wait_share, wait basis) and each rank's measured waits (rank_wait) and
traced NCCL time, as JSON lines.
"""
import argparse
import json
import os
import statistics
import sys
import time

SCENARIOS = ["hand_r1", "hand_r0", "watch_r1", "watch_r0", "watch_read0", "watch_none", "hand_none",
             "hand_read_r1", "fsdp_r1", "fsdp_r0", "plain_none", "plain_read0"]
MICRO = 4
SLEEP_MS = 5


def build(torch):
    """The small GPT of the GPU tests (python/tests/small_gpt.py), larger: d 512, 6 blocks of 8 heads, seq 256."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "tests"))
    from small_gpt import build_gpt
    return build_gpt(torch, d=512, layers=6, heads=8, seq=256, vocab=8192, batch=8, pool_size=8)


def fetch(torch, pool, i, slow):
    if slow:
        time.sleep(SLEEP_MS / 1000)
    return pool[i % len(pool)].cuda(non_blocking=True)


class OwnWaits:
    """The control's own measure: the GPU time from backward's last kernel (an autograd callback queued
    at the loss, before DDP's) to backward's return, summed per step; no steptrace."""

    def __init__(self, torch):
        self.torch, self.pairs, self.step = torch, [], 0

    def backward(self, loss):
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        loss.register_hook(lambda g: torch.autograd.Variable._execution_engine.queue_callback(start.record))
        loss.backward()
        end.record()
        self.pairs.append((self.step, start, end))

    def per_step(self):
        self.torch.cuda.synchronize()
        out = {}
        for s, a, b in self.pairs:
            out[s] = out.get(s, 0.0) + a.elapsed_time(b)
        return [out[s] for s in sorted(out)]


def run(args, name, model, opt, pool, rank, torch, steptrace):
    import contextlib
    if name.startswith("plain"):
        steptrace = None
    own = OwnWaits(torch) if steptrace is None else None
    hand = name.startswith("hand") or own is not None
    slow = (name.endswith("_r1") and rank == 1) or (name.endswith("_r0") and rank == 0)
    read = "all" if "read_r" in name else "rank0" if name.endswith("read0") else "none"
    if own is not None:  # the control: the same loop, its phases no-ops
        class _No:
            def step(self):
                return contextlib.nullcontext()

            def phase(self, _):
                return contextlib.nullcontext()
        steptrace = _No()
    else:
        steptrace.start(log_path=os.path.join(args.out, f"{name}-{{rank}}.jsonl"), summary=False)
        steptrace.cross_rank()
    if not hand:
        steptrace.watch(model, opt)
    clock = []
    i = 0
    t0 = time.perf_counter()
    for s in range(args.steps):
        step = steptrace.step() if hand else contextlib.nullcontext()
        with step:
            for m in range(MICRO):
                sync = contextlib.nullcontext() if m == MICRO - 1 or not hasattr(model, "no_sync") else model.no_sync()
                if hand:
                    with steptrace.phase("input"):
                        b = fetch(torch, pool, i, slow)
                else:
                    b = fetch(torch, pool, i, slow)
                i += 1
                with sync:
                    if hand:
                        with steptrace.phase("forward"):
                            loss = model(b[:, :-1], b[:, 1:]) / MICRO
                        with steptrace.phase("backward"):
                            if own is not None:
                                own.backward(loss)
                            else:
                                loss.backward()
                    else:
                        loss = model(b[:, :-1], b[:, 1:]) / MICRO
                        loss.backward()
            if hand:
                with steptrace.phase("optimizer"):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
            else:
                opt.step()
                opt.zero_grad(set_to_none=True)
        if read == "all" or (read == "rank0" and rank == 0):
            v = loss.item()
            if rank == 0:
                print(f"{name} step {s} loss {v:.4f}", flush=True)
        t1 = time.perf_counter()
        clock.append((t1 - t0) * 1e3)
        t0 = t1
        if own is not None:
            own.step += 1
    torch.cuda.synchronize()
    if own is not None:
        with open(os.path.join(args.out, f"own-{name}-{rank}.json"), "w") as f:
            json.dump(own.per_step(), f)
    else:
        if not hand:
            steptrace.unwatch()
        steptrace.stop()
    with open(os.path.join(args.out, f"clock-{name}-{rank}.json"), "w") as f:
        json.dump(clock, f)


def main(args):
    import torch
    import torch.distributed as dist
    import steptrace
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    os.makedirs(args.out, exist_ok=True)
    names = [n for n in args.scenarios.split(",") if n]
    ddp_names = [n for n in names if not n.startswith("fsdp")]
    if ddp_names:
        from torch.nn.parallel import DistributedDataParallel as DDP
        gpt, pool = build(torch)
        model = torch.compile(DDP(gpt.cuda()))
        opt = torch.optim.AdamW(gpt.parameters(), lr=1e-4, fused=True)
        # Compile (train graph) before any scenario: its first steps are not in a run.
        for i in range(3):
            for m in range(MICRO):
                b = pool[m].cuda()
                loss = model(b[:, :-1], b[:, 1:]) / MICRO
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        for n in ddp_names:
            dist.barrier()
            run(args, n, model, opt, pool, rank, torch, steptrace)
    fsdp_names = [n for n in names if n.startswith("fsdp")]
    if fsdp_names:
        from torch.distributed.fsdp import fully_shard
        gpt, pool = build(torch)
        gpt = gpt.cuda()
        for blk in gpt.blocks:
            fully_shard(blk)
        fully_shard(gpt)
        opt = torch.optim.AdamW(gpt.parameters(), lr=1e-4)
        for n in fsdp_names:
            dist.barrier()
            run(args, n, gpt, opt, pool, rank, torch, steptrace)
    dist.barrier()
    dist.destroy_process_group()


def lines(path):
    """The step lines, compact ones expanded (steptrace.lines)."""
    if not os.path.exists(path):
        return []
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    from steptrace.lines import iter_step_lines
    return list(iter_step_lines(path, strict=False))


def med(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return round(statistics.median(xs), 3) if xs else None


def summarize(out):
    for name in SCENARIOS:
        if name.startswith("plain"):
            row = {"scenario": name}
            for k in (0, 1):
                p = os.path.join(out, f"own-{name}-{k}.json")
                if os.path.exists(p):
                    w = json.load(open(p))[20:]
                    clock = json.load(open(os.path.join(out, f"clock-{name}-{k}.json")))[20:]
                    row[f"rank{k}"] = {"own_wait_ms_median": med(w), "own_wait_ms_p90": round(sorted(w)[int(0.9 * len(w))], 3) if w else None,
                                       "program_iter_ms": med(clock)}
            if len(row) > 1:
                print(json.dumps(row))
            continue
        r0, r1 = lines(os.path.join(out, f"{name}-0.jsonl")), lines(os.path.join(out, f"{name}-1.jsonl"))
        if not r0:
            continue
        slowed = 1 if name.endswith("_r1") else 0 if name.endswith("_r0") else None
        views = [l["cross_rank"] for l in r0 if isinstance(l.get("cross_rank"), dict) and l["cross_rank"].get("step", 0) >= 20]
        phases, basis = {}, {}
        for v in views:
            phases[str(v.get("culprit_phase"))] = phases.get(str(v.get("culprit_phase")), 0) + 1
            basis[str(v.get("wait_basis"))] = basis.get(str(v.get("wait_basis")), 0) + 1
        row = {"scenario": name, "slowed": slowed, "views": len(views),
               "named_slowed": sum(1 for v in views if slowed is not None and v.get("slowest_rank") == slowed),
               "slowest": [v.get("slowest_rank") for v in views],
               "culprit_phase": phases, "wait_basis": basis,
               "balanced": [v.get("balanced") for v in views],
               "wait_share": [round(v["wait_share"], 3) if isinstance(v.get("wait_share"), (int, float)) else None for v in views],
               "gap_ms": med([v.get("gap_ms") for v in views])}
        for k, ls in enumerate((r0, r1)):
            rw = [l["rank_wait"] for l in ls if isinstance(l.get("rank_wait"), dict) and l["rank_wait"].get("step", 0) >= 20]
            traced = [l for l in ls if l.get("global_step", 0) >= 20 and isinstance(l.get("gpu"), dict)]
            clock = []
            cp = os.path.join(out, f"clock-{name}-{k}.json")
            if os.path.exists(cp):
                clock = json.load(open(cp))[20:]
            row[f"rank{k}"] = {
                "wait_ms": med([w.get("wait_ms") for w in rw]), "work_ms": med([w.get("work_ms") for w in rw]),
                "step_ms": med([w.get("step_time_ms") for w in rw]), "between_ms": med([w.get("between_ms") for w in rw]),
                "basis": sorted({str(w.get("wait_basis")) for w in rw}),
                "traced_steps": len(traced),
                "traced_nccl_ms": med([l.get("nccl_time_ms") for l in traced]),
                "traced_nccl_exposed_ms": med([l["gpu"].get("nccl_exposed_ms") for l in traced]),
                "line_step_ms": med([l.get("step_time_ms") for l in ls if l.get("global_step", 0) >= 20]),
                "program_iter_ms": med(clock)}
        print(json.dumps(row))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--summarize")
    a = ap.parse_args()
    if a.summarize:
        summarize(a.summarize)
    else:
        main(a)
