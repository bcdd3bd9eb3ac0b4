"""GPU tests of the Python package with PyTorch (a GPU and torch needed; no pytest needed):
`python tests/test_torch_gpu.py OUT_DIR`.

1. A small GPT trained in Python under steptrace: loader() steps, phases, record(loss tensor),
   use_torch_memory(); the lines carry GPU attribution per phase (backward's kernels, launched by
   autograd's threads, in `backward`), the allocator's numbers, MFU.
2. stop() releases CUPTI: torch.profiler then profiles the same loop, and per-phase GPU kernel time
   agrees with steptrace's on adjacent steps within 2 % (scripts/compare_kineto.py).
3. Coexistence in one process, both orders (each in a child process): what each tool sees.
4. What record(tensor) saves over record(tensor.item()): the host's time to queue a step.
Writes OUT_DIR/python_gpu.json with the numbers.
"""
import json
import os
import subprocess
import sys
import time

import steptrace  # before torch: the order that once aborted (python/CMakeLists.txt, exported symbols)

import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
B, S, V, D, LAYERS = 16, 256, 4096, 512, 4


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.zeros(S, D))
        layer = nn.TransformerEncoderLayer(D, 8, 4 * D, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS)
        self.head = nn.Linear(D, V)
        self.mask = nn.Transformer.generate_square_subsequent_mask(S)

    def forward(self, x):
        h = self.emb(x) + self.pos
        h = self.blocks(h, mask=self.mask.to(x.device), is_causal=True)
        return self.head(h)


class both:
    """A steptrace phase and a torch.profiler annotation "phase:<name>" (what compare_kineto.py reads)."""

    def __init__(self, name):
        self.st = steptrace.phase(name)
        self.rf = torch.profiler.record_function("phase:" + name)

    def __enter__(self):
        self.st.__enter__()
        self.rf.__enter__()

    def __exit__(self, *exc):
        self.rf.__exit__(*exc)
        self.st.__exit__(*exc)


def batches(n, batch=B):
    g = torch.Generator().manual_seed(0)
    for _ in range(n):
        yield torch.randint(0, V, (batch, S + 1), generator=g).pin_memory()


def make():
    torch.manual_seed(0)
    model = GPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    return model, opt


def train(model, opt, data, use_item=False, enqueue=None):
    """One loop over `data` (an iterable of batches); phases as a user writes them."""
    for batch in data:
        t0 = time.perf_counter()
        with both("h2d"):
            batch = batch.cuda(non_blocking=True)
            x, y = batch[:, :-1], batch[:, 1:]
        with both("forward"):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        steptrace.record("loss", loss.item() if use_item else loss)
        with both("backward"):
            loss.backward()
        with both("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        if enqueue is not None:
            enqueue.append(time.perf_counter() - t0)


def lines_of(path):
    return [json.loads(l) for l in open(path) if '"event"' not in l[:20]]


def part_train_and_compare(out):
    problems, result = [], {}
    model, opt = make()
    params = sum(p.numel() for p in model.parameters())
    log = os.path.join(out, "python_gpt.jsonl")
    if os.path.exists(log):
        os.remove(log)
    assert steptrace.start(log_path=log, summary=False, trace_every=1, tokens_per_step=B * S,
                           flops_per_token=6 * params, dtype="bf16", stall_after_s=0, line_detail="full")
    assert steptrace.use_torch_memory()
    train(model, opt, steptrace.loader(batches(40)))
    summary = steptrace.stop()
    lines = lines_of(log)
    result["steps"] = summary["steps"]
    steady = lines[10:-1]
    for l in steady:
        g = l.get("gpu") or {}
        if not g.get("kernels"):
            problems.append(f"step {l['global_step']}: no GPU kernels attributed ({l['null_reasons'].get('gpu')})")
            break
        for ph in ("forward", "backward", "optimizer"):
            if not (l["phases"].get(ph, {}).get("gpu") or {}).get("kernel_ms"):
                problems.append(f"step {l['global_step']}: no GPU kernel time in {ph}")
        if l["memory"]["allocator"]["allocated_bytes"] is None:
            problems.append(f"step {l['global_step']}: allocator numbers missing")
        if l.get("loss") is None or not (0 < l["loss"] < 20):
            problems.append(f"step {l['global_step']}: loss {l.get('loss')}")
        if l.get("estimated_mfu") is None:
            problems.append(f"step {l['global_step']}: MFU null: {l['null_reasons'].get('estimated_mfu')}")
    result["mfu_median"] = sorted(l["estimated_mfu"] or 0 for l in steady)[len(steady) // 2]
    result["backward_kernel_ms"] = steady[-1]["phases"]["backward"]["gpu"]["kernel_ms"]
    result["peak_allocated_bytes"] = steady[-1]["memory"]["allocator"]["peak_allocated_bytes"]
    # torch.profiler on the next steps of the same model: CUPTI was released by stop().
    trace = os.path.join(out, "python_gpt_kineto.json")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        train(model, opt, batches(10))
        torch.cuda.synchronize()
    prof.export_chrome_trace(trace)
    cmp = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "compare_kineto.py"), log, trace],
                         capture_output=True, text=True)
    print(cmp.stdout)
    result["compare_kineto"] = cmp.stdout
    worst = float(cmp.stdout.strip().splitlines()[-1].split()[-2]) if cmp.returncode == 0 else None
    result["largest_difference_percent"] = worst
    if worst is None or worst > 2.0:
        problems.append(f"per-phase kernel time differs from torch.profiler's by {worst} % (> 2 %): {cmp.stderr[-300:]}")
    return problems, result


def part_record_cost(batch):
    """Host time to queue one step: record(loss) (no sync) against record(loss.item()), at a batch
    size where the GPU's step is longer than the host's (GPU-bound) or shorter (host-bound)."""
    model, opt = make()
    res = {}
    for name, use_item in (("tensor", False), ("item", True), ("tensor", False), ("item", True)):
        enq = []
        steptrace.start(log_path="", summary=False, stall_after_s=0)
        train(model, opt, steptrace.loader(batches(30, batch)), use_item=use_item, enqueue=enq)
        steptrace.stop()
        torch.cuda.synchronize()
        res.setdefault(name, []).append(sorted(enq[5:])[len(enq[5:]) // 2] * 1e3)
    return {k: min(v) for k, v in res.items()}


def child(order, out):
    """One process: steptrace and torch.profiler in the given order."""
    model, opt = make()
    log = os.path.join(out, f"coexist_{order}.jsonl")
    if os.path.exists(log):
        os.remove(log)
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    trace = os.path.join(out, f"coexist_{order}_kineto.json")
    if order == "steptrace_first":
        steptrace.start(log_path=log, summary=False, trace_every=1, stall_after_s=0, line_detail="full")
        train(model, opt, steptrace.loader(batches(5)))
        with torch.profiler.profile(activities=acts) as prof:
            train(model, opt, steptrace.loader(batches(5)))
            torch.cuda.synchronize()
        steptrace.stop()
    else:
        with torch.profiler.profile(activities=acts) as prof:
            steptrace.start(log_path=log, summary=False, trace_every=1, stall_after_s=0, line_detail="full")
            train(model, opt, steptrace.loader(batches(5)))
            steptrace.stop()
            torch.cuda.synchronize()
    prof.export_chrome_trace(trace)
    kernels = sum(1 for e in json.load(open(trace))["traceEvents"] if e.get("cat") == "kernel")
    lines = lines_of(log)
    # A line's `gpu` is null (with a reason) without attribution; the loader's exhaustion steps have
    # attribution and no kernel.
    attributed = [l for l in lines if l.get("gpu") is not None]
    why = sorted({l["null_reasons"].get("gpu", "") for l in lines if l.get("gpu") is None})
    print(json.dumps({"order": order, "profiler_kernels": kernels, "steptrace_lines": len(lines),
                      "steptrace_lines_attributed": len(attributed),
                      "steptrace_kernels": sum(l["gpu"]["kernels"] for l in attributed),
                      "steptrace_gpu_null_reasons": why}))


def main(argv):
    if len(argv) == 3 and argv[0] == "child":
        child(argv[1], argv[2])
        return 0
    out = os.path.abspath(argv[0] if argv else ".")
    if not torch.cuda.is_available():
        print("skipped: no CUDA device")
        return 77
    problems, result = part_train_and_compare(out)
    result["record_enqueue_ms"] = {f"batch {b}": part_record_cost(b) for b in (B, 8 * B)}
    print("record: host time to queue a step, ms (median):", result["record_enqueue_ms"])
    fwd = steptrace.phase("forward")
    steptrace.start(log_path="", summary=False, gpu="off", max_spans_per_step=1 << 20)
    with steptrace.step():
        n = 200000
        t = time.perf_counter_ns()
        for _ in range(n):
            with fwd:
                pass
        result["phase_scope_ns"] = (time.perf_counter_ns() - t) / n
    steptrace.stop()
    print(f"python phase scope: {result['phase_scope_ns']:.0f} ns")
    result["coexistence"] = []
    for order in ("steptrace_first", "profiler_first"):
        r = subprocess.run([sys.executable, __file__, "child", order, out], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            problems.append(f"coexistence {order}: the process failed ({r.returncode}): {r.stderr[-600:]}")
            continue
        info = json.loads(r.stdout.strip().splitlines()[-1])
        print("coexistence:", info)
        result["coexistence"].append(info)
        if info["steptrace_lines"] < 5:
            problems.append(f"coexistence {order}: steptrace wrote {info['steptrace_lines']} lines")
        if info["steptrace_lines_attributed"] < info["steptrace_lines"] and not all(info["steptrace_gpu_null_reasons"]):
            problems.append(f"coexistence {order}: lines without GPU data and without a reason")
        if info["profiler_kernels"] == 0 and info["steptrace_kernels"] == 0:
            problems.append(f"coexistence {order}: neither tool saw a kernel")
    json.dump(result, open(os.path.join(out, "python_gpu.json"), "w"), indent=1)
    for p in problems:
        print("FAIL:", p)
    print("python_gpu:", "ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
