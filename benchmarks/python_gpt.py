#!/usr/bin/env python3
"""(b) of benchmarks/default_cost.sh: a PyTorch eager GPT training loop, host-bound (the host takes
longer to queue a step's launches than the GPU takes to run them), timed with and without steptrace.

    python_gpt.py --mode off|floor|default|full|full_nocounters [--steps 300] [--warmup 50]
                  [--layers 8] [--lines PATH] [--inject LIB] [--device cuda]

The model has the shape of python/tests/test_torch_gpu.py's GPT (embedding + learned positions,
nn.TransformerEncoder blocks of attention + MLP, pre-norm, an LM head; batch 16 x 256 tokens, vocab 4096,
d_model 512, bf16 autocast, fused AdamW) with more layers: that test's 4 layers made ~324 kernels per step
(its coexistence check: 3236 kernels in 10 steps, results/2026-11-24-python) in ~13 ms of host time, so
8 layers make ~600 launches; default_cost.sh runs 6 (~460) to fit its time on the device.

Modes (the loop is the same code in all of them; off and floor run it with no-op scopes):
  off              steptrace is not imported at all
  floor            steptrace is not imported; CUDA_INJECTION64_PATH names benchmarks/raw_cupti_inject.cpp's
                   library: CUPTI's records and empty launch-site callbacks, what CUPTI costs by itself
  default          import steptrace; start(log_path=...), nothing else set (no STEPTRACE_* variable but
                   STEPTRACE_LOG may be in the environment)
  full             as default with STEPTRACE_TRACE_EVERY=1 (every step traced)
  full_nocounters  as full with STEPTRACE_COUNTERS=off
  default_nocounters  as default with STEPTRACE_COUNTERS=off
  alternate        --rounds R rounds in this one process, each one block of warmup + steps steps per mode
                   of ALTERNATE (off, default, full, full_nocounters, nomarkers, default_full, nocupti,
                   nosampler; --alternate-modes a subset) in an order shuffled per round
                   (seed: the round); steptrace is started with the mode's settings before its block and
                   stopped after it (off: not started; steptrace is imported, its scopes replaced by
                   no-op ones as in mode off). The modes share the process - placement, memory layout,
                   clocks, warm caches - which separate runs of a host-bound loop do not (their spread
                   was +-8 %). The warm-up steps let each start settle and are not timed. Prints one
                   line per block: block workload=python_gpt round=R mode=M ... lines=PATH|-
                   (benchmarks/alternate_summary.py pairs each block with its round's off block).
The steptrace modes set their variables themselves when absent and refuse any other STEPTRACE_* variable,
so that a stray setting cannot change what a mode measures; every mode but floor refuses
CUDA_INJECTION64_PATH.

Each step: input (a pinned batch from a pool, copied to the GPU), forward, backward, optimizer, then
loss.item() (as a loop that logs its loss does; it also keeps steps from overlapping), inside
`with steptrace.step(tokens=...)` in the steptrace modes. Step time is time.perf_counter() around all of
it, steptrace's own step exit included. Prints:
  result workload=python_gpt mode=M layers=L steps=S warmup=W mean_ms=... median_ms=... p10_ms=...
         p90_ms=... launches_per_step=N|? floor_records=N|- wall_s=...
  lines PATH|-
launches_per_step: in the steptrace modes the last line's overhead.launches_per_step (kernels, copies and
memsets of the recent traced steps), else the median of the traced lines' gpu.kernels; in floor the
records CUPTI delivered over all steps (set-up included) per step; else unknown (?).
"""
import argparse
import ctypes
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("off", "floor", "default", "full", "full_nocounters", "default_nocounters", "alternate")
ALTERNATE = {  # --mode alternate: each block's start() settings (None: steptrace not started)
    "off": None,
    "default": {},
    "full": {"trace_every": 1, "line_detail": "full"},
    "full_nocounters": {"trace_every": 1, "counters": "off", "line_detail": "full"},
    "nomarkers": {"stream_markers": False},
    "default_full": {"line_detail": "full"},     # the defaults, full lines (the overhead's parts to read)
    "nocupti": {"cupti": "off"},                 # no CUPTI at all: scopes, markers, samplers, lines
    "nosampler": {"memory_sample_ms": 60000},    # the defaults but the memory/NVML readings
}
MODE_ENV = {  # what each steptrace mode sets, and nothing else (STEPTRACE_LOG aside)
    "default": {},
    "full": {"STEPTRACE_TRACE_EVERY": "1"},
    "full_nocounters": {"STEPTRACE_TRACE_EVERY": "1", "STEPTRACE_COUNTERS": "off"},
    "default_nocounters": {"STEPTRACE_COUNTERS": "off"},
}


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", required=True, choices=MODES)
    p.add_argument("--steps", type=int, default=300, help="timed steps")
    p.add_argument("--warmup", type=int, default=50, help="steps before the timed ones")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--dmodel", type=int, default=512)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--lines", default="", help="steptrace's JSONL lines (steptrace modes; replaced)")
    p.add_argument("--inject", default=os.path.join(HERE, "..", "build-bench", "benchmarks", "libraw_cupti_inject.so"),
                   help="the raw-CUPTI injection library (floor)")
    p.add_argument("--device", default="cuda", help="cuda; cpu only to check the script on a machine without a GPU")
    p.add_argument("--rounds", type=int, default=6, help="alternate: rounds of one block per mode")
    p.add_argument("--lines-dir", default=".", help="alternate: where each steptrace block's lines go")
    p.add_argument("--alternate-modes", default=",".join(ALTERNATE), help="alternate: the modes of each round")
    a = p.parse_args(argv)
    if a.steps < 1 or a.warmup < 0 or a.layers < 1 or a.rounds < 1:
        p.error("--steps >= 1, --warmup >= 0, --layers >= 1, --rounds >= 1")
    modes = [m for m in a.alternate_modes.split(",") if m]
    bad = [m for m in modes if m not in ALTERNATE]
    if bad or not modes:
        p.error(f"--alternate-modes: choose from {', '.join(ALTERNATE)} (got {bad})")
    return a


def die(code, message):
    print(f"python_gpt: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


def prepare_environment(a):
    """Before torch is imported (the CUDA driver reads CUDA_INJECTION64_PATH at cuInit)."""
    if a.mode == "floor":
        lib = os.path.abspath(a.inject)
        if not os.path.isfile(lib):
            die(2, f"floor: no injection library at {lib} (build target raw_cupti_inject)")
        if os.environ.get("CUDA_INJECTION64_PATH", lib) != lib:
            die(2, f"floor: CUDA_INJECTION64_PATH is already {os.environ['CUDA_INJECTION64_PATH']}")
        os.environ["CUDA_INJECTION64_PATH"] = lib
        a.inject = lib
    elif os.environ.get("CUDA_INJECTION64_PATH"):
        die(2, f"mode {a.mode}: CUDA_INJECTION64_PATH is set ({os.environ['CUDA_INJECTION64_PATH']}): "
               "a CUDA tool would be measured too")
    if a.mode == "alternate":
        have = sorted(k for k in os.environ if k.startswith("STEPTRACE_"))
        if have:
            die(2, f"mode alternate sets each block's settings itself; the environment has {have}")
    if a.mode in MODE_ENV:
        for k, v in MODE_ENV[a.mode].items():
            os.environ.setdefault(k, v)
        want = dict(MODE_ENV[a.mode])
        have = {k: v for k, v in os.environ.items() if k.startswith("STEPTRACE_") and k != "STEPTRACE_LOG"}
        if have != want:
            die(2, f"mode {a.mode} wants exactly {want or 'no STEPTRACE_* setting'} (STEPTRACE_LOG aside), "
                   f"the environment has {have}")


def build(a, torch):
    nn = torch.nn

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(a.vocab, a.dmodel)
            self.pos = nn.Parameter(torch.zeros(a.seq, a.dmodel))
            layer = nn.TransformerEncoderLayer(a.dmodel, 8, 4 * a.dmodel, dropout=0.0, batch_first=True, norm_first=True)
            self.blocks = nn.TransformerEncoder(layer, a.layers, enable_nested_tensor=False)
            self.head = nn.Linear(a.dmodel, a.vocab)
            # A buffer, moved to the device once (the test moves its mask every forward: a pageable copy).
            self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(a.seq), persistent=False)
            # torch < 2.0 (Debian's CPU torch, used only to check this script without a GPU) has no is_causal.
            import inspect
            self.causal = {"is_causal": True} if "is_causal" in inspect.signature(nn.TransformerEncoder.forward).parameters else {}

        def forward(self, x):
            h = self.emb(x) + self.pos
            h = self.blocks(h, mask=self.mask, **self.causal)
            return self.head(h)

    torch.manual_seed(0)
    model = GPT().to(a.device)
    cuda = a.device.startswith("cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, **({"fused": True} if cuda else {}))
    g = torch.Generator().manual_seed(0)
    pool = [torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g) for _ in range(8)]
    if cuda:
        pool = [b.pin_memory() for b in pool]
    return model, opt, pool


class _NoScope:
    """The off and floor modes' stand-in for steptrace's scopes: the same `with` statements, no work."""
    __slots__ = ()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def read_lines(path):
    lines = []
    try:
        with open(path) as f:
            for text in f:
                try:
                    line = json.loads(text)
                except ValueError:
                    continue
                if "event" not in line:
                    lines.append(line)
    except OSError:
        pass
    return lines


def launches_from_lines(lines):
    for line in reversed(lines):
        n = (line.get("overhead") or {}).get("launches_per_step")
        if n is not None:
            return f"{n:g}"
    kernels = [line["gpu"]["kernels"] for line in lines if line.get("gpu") and line["gpu"].get("kernels") is not None]
    return f"{statistics.median(kernels):g}" if kernels else "?"


def quantile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * (len(sorted_values) - 1) + 0.5))]


def run_steps(a, torch, model, opt, pool, step_scope, phases, record):
    """warmup + steps steps of the loop; returns the timed steps' times (ms) and their wall time (s)."""
    F = torch.nn.functional
    tokens = a.batch * a.seq
    autocast = torch.autocast("cuda" if a.device.startswith("cuda") else "cpu", dtype=torch.bfloat16)
    times = []
    wall0 = time.perf_counter()
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            wall0 = time.perf_counter()
        t0 = time.perf_counter()
        with step_scope(tokens=tokens):
            with phases["input"]:
                batch = pool[s % len(pool)].to(a.device, non_blocking=True)
                x, y = batch[:, :-1], batch[:, 1:]
            with phases["forward"]:
                with autocast:
                    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
            with phases["backward"]:
                loss.backward()
            with phases["optimizer"]:
                opt.step()
                opt.zero_grad(set_to_none=True)
            loss_value = loss.item()
            if record is not None:
                record("loss", loss_value)
        if s >= a.warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    return times, time.perf_counter() - wall0


def start_block(steptrace, lines_dir, name, settings, **extra):
    """Starts steptrace for one block of an in-process alternation with `settings` (None: not started);
    returns the block's lines path (replaced: steptrace appends), or "-"."""
    if settings is None:
        return "-"
    lines = os.path.abspath(os.path.join(lines_dir, name + ".jsonl"))
    if os.path.exists(lines):
        os.remove(lines)
    # The lines as the settings make them: a block on the defaults writes the default (compact) line,
    # what its users pay; a block that wants the full line's accounting names line_detail.
    if not steptrace.start(log_path=lines, summary=False, **extra, **settings):
        die(3, f"steptrace.start() returned False for block {name}")
    return lines


def alternate(a, torch, model, opt, pool):
    """--mode alternate: one block per mode per round, in one process (see the docstring)."""
    import random
    import steptrace
    none = _NoScope()
    off_scopes = (lambda tokens=None: none, {name: none for name in ("input", "forward", "backward", "optimizer")}, None)
    for r in range(a.rounds):
        order = [m for m in a.alternate_modes.split(",") if m]
        random.Random(r + 31).shuffle(order)
        for mode in order:
            settings = ALTERNATE[mode]
            lines = start_block(steptrace, a.lines_dir, f"alternate_python_gpt_{r}_{mode}", settings)
            scopes = off_scopes
            if settings is not None:
                scopes = (steptrace.step, {name: steptrace.phase(name) for name in ("input", "forward", "backward", "optimizer")},
                          steptrace.record)
            times, wall_s = run_steps(a, torch, model, opt, pool, *scopes)
            if a.device.startswith("cuda"):
                torch.cuda.synchronize()
            if settings is not None:
                steptrace.stop()
            if lines != "-":  # the program's own clock per step beside its lines (step warmup + i)
                with open(lines + ".times.json", "w") as f:
                    json.dump({"first_step": a.warmup, "ms": times}, f)
            print(f"block workload=python_gpt round={r} mode={mode} steps={len(times)} mean_ms={statistics.fmean(times):.4f} "
                  f"median_ms={statistics.median(times):.4f} launches_per_step=? lines={lines} wall_s={wall_s:.3f}", flush=True)
    return 0


def main(argv):
    a = parse(argv)
    prepare_environment(a)
    import torch

    cuda = a.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        die(1, "no CUDA device (use --device cpu only to check the script)")
    model, opt, pool = build(a, torch)
    if cuda:
        torch.cuda.synchronize()

    if a.mode == "alternate":
        return alternate(a, torch, model, opt, pool)

    inject = None
    if a.mode == "floor":
        inject = ctypes.CDLL(a.inject)  # already loaded by the driver at cuInit: the same copy
        inject.raw_cupti_inject_records.restype = ctypes.c_long
        if cuda and inject.raw_cupti_inject_active() != 1:
            die(3, "floor: the injection library did not attach CUPTI (its message above says why)")

    steptrace = None
    lines_path = ""
    if a.mode in MODE_ENV:
        import steptrace  # noqa: F811 (only in the steptrace modes: off and floor never load it)
        lines_path = os.environ.get("STEPTRACE_LOG") or a.lines or os.path.abspath(f"python_gpt_{a.mode}.jsonl")
        if os.path.exists(lines_path):
            os.remove(lines_path)  # steptrace appends; one run's lines per file
        if not steptrace.start(log_path=lines_path):
            die(3, "steptrace.start() returned False")
        step_scope = steptrace.step
        phases = {name: steptrace.phase(name) for name in ("input", "forward", "backward", "optimizer")}
        record = steptrace.record
    else:
        none = _NoScope()
        step_scope = lambda tokens=None: none  # noqa: E731
        phases = {name: none for name in ("input", "forward", "backward", "optimizer")}
        record = None

    times, wall_s = run_steps(a, torch, model, opt, pool, step_scope, phases, record)

    if cuda:
        torch.cuda.synchronize()
    floor_records = "-"
    launches = "?"
    if steptrace is not None:
        steptrace.stop()
        launches = launches_from_lines(read_lines(lines_path))
    if inject is not None:
        n = inject.raw_cupti_inject_records()
        if cuda and n <= 0:
            die(3, f"floor: CUPTI delivered {n} records: the floor was not on")
        floor_records = str(n)
        if n > 0:
            launches = f"{n / (a.warmup + a.steps):.0f}"
    ordered = sorted(times)
    print(f"result workload=python_gpt mode={a.mode} layers={a.layers} steps={len(times)} warmup={a.warmup} "
          f"mean_ms={statistics.fmean(times):.4f} median_ms={statistics.median(times):.4f} "
          f"p10_ms={quantile(ordered, 0.1):.4f} p90_ms={quantile(ordered, 0.9):.4f} launches_per_step={launches} "
          f"floor_records={floor_records} wall_s={wall_s:.3f}", flush=True)
    print(f"lines {lines_path or '-'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
