#!/usr/bin/env python3
"""The HTML report as a person sees it: headless Chromium opens each report, offline.

  report_check.py BUILD_DIR [--screenshot docs/report.png]

Reports are built (scripts/steptrace_report.py) from: the lines an H100 wrote (tests/data), the
example trainer's lines on this machine (the demo's program; no GPU here, so GPU charts say why they
are empty), a fake-GPU run with captured traces (tests/trace_feed), and 4 and 16 ranks made from the
H100 lines (one rank slowed) for the per-rank views, and the diagnosis basis (issue #31): a GPU-bound
H100 run traced one step in 4 as written (lines without `diagnosis.basis`, untraced ones UNKNOWN) and
rewritten in the new schema (untraced lines carry the last traced step's COMPUTE-BOUND): the first is
headlined UNKNOWN (the most of its lines) with COMPUTE-BOUND named beside it, the second COMPUTE-BOUND
with the right shares per basis, and their untraced steps must be gaps in the
GPU charts (checked in the screenshot's pixels). And a log several runs appended to (issue #32: an
old log's lines without run_id, then the example trainer run twice on the same STEPTRACE_LOG, each run
counting global_step from 0; and the example's lines with line_detail=compact, run records and
steptrace.step/2 lines): by default the latest run alone (its steps, none going back), `--run` the
first run and `?`, `--run all` one series per run (each within its own steps in the screenshot), the
header naming every run with its step range and lines; an unknown id exits 2 listing the ids; two
ranks' files of two runs each. And hostile lines (issue #33, hostile_checks): markup in every string
and in the log's directory and file names, lines of the wrong types, 1 000 lines of 200 new phase
names each, trace paths outside the log's directory. For each, Chromium loads the page from disk:
no script error and no console message at all, the page's title as the report made it, no request (the
page's Content-Security-Policy forbids any, and the browser's own resource count must be 0), every
chart drew data or says why it has none, no line of the real logs skipped as malformed; then a
screenshot is decoded (PNG, here in Python) and each chart's rectangle must hold coloured pixels. Exit
0 when all holds; `--screenshot` keeps the H100 report's screenshot; `--only hostile` runs the hostile
cases alone. REPORT_UNDER_TEST=path checks another copy of the report (e.g. an older one).
"""
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from urllib.parse import quote, unquote

from _paths import ROOT
from steptrace.lines import step_lines

REPORT = os.environ.get("REPORT_UNDER_TEST") or os.path.join(ROOT, "scripts", "steptrace_report.py")


def chromium():
    for name in (os.environ.get("CHROMIUM", ""), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    sys.exit("report_check: no Chromium (Debian package `chromium`; scripts/test.sh installs it)")


def browse(page, profile, *args):
    cmd = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
           "--enable-logging=stderr", "--v=0", f"--user-data-dir={profile}", "--virtual-time-budget=5000",
           *args, "file://" + quote(os.path.abspath(page))]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def png_pixels(path):
    """Width, height and RGB(A) rows of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, [], None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, f"PNG kind {depth}/{ctype}/{interlace}"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat.append(body)
        pos += 12 + n
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        ft = raw[y * (stride + 1)]
        cur = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ft == 1:
            for i in range(bpp, stride):
                cur[i] = (cur[i] + cur[i - bpp]) & 255
        elif ft == 2:
            cur = bytearray((a + b) & 255 for a, b in zip(cur, prev))
        elif ft == 3:
            for i in range(stride):
                left = cur[i - bpp] if i >= bpp else 0
                cur[i] = (cur[i] + ((left + prev[i]) >> 1)) & 255
        elif ft == 4:
            for i in range(stride):
                a = cur[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(cur)
        prev = cur
    return w, h, bpp, rows


def coloured(rows, bpp, rect, width, height, grey=None):
    """Saturated pixels (series colours; axes, grid and text are grey) inside rect (x, y, w, h), and
    pixels of `grey` (#rrggbb: the diagnosis strip's colour for basis none, a grey that is data)."""
    x0, y0 = max(0, int(rect[0])), max(0, int(rect[1]))
    x1, y1 = min(width, int(rect[0] + rect[2])), min(height, int(rect[1] + rect[3]))
    k = tuple(int(grey[i:i + 2], 16) for i in (1, 3, 5)) if grey else None
    n = 0
    for y in range(y0, y1):
        row = rows[y]
        for x in range(x0, x1):
            r, g, b = row[x * bpp], row[x * bpp + 1], row[x * bpp + 2]
            if max(r, g, b) - min(r, g, b) > 40 or (r, g, b) == k:
                n += 1
    return n


def with_basis(src_path, out_path):
    """The lines of src_path in the schema with `diagnosis.basis` (docs/schema.md): a traced line's basis
    is traced; an untraced line (`gpu` null) after a traced one carries its label (basis carried,
    carried_from_step), except every 10th untraced line, INPUT-BOUND from host times (host_only); an
    untraced line before any traced one knows nothing (none, UNKNOWN)."""
    last, untraced = None, 0
    with open(out_path, "w") as f:
        for line in step_lines(src_path):
            d = dict(line["diagnosis"], carried_from_step=None)
            if isinstance(line.get("gpu"), dict):
                d["basis"], last = "traced", line
            else:
                untraced += 1
                if untraced % 10 == 0:
                    d.update(label="INPUT-BOUND", basis="host_only")
                elif last is not None:
                    d.update(label=last["diagnosis"]["label"], basis="carried", carried_from_step=last["global_step"])
                else:
                    d.update(label="UNKNOWN", basis="none")
            f.write(json.dumps(dict(line, diagnosis=d)) + "\n")
    return out_path


def expected_verdict(path):
    """What the header must say of the lines at path, computed here from the lines, not by the report:
    the label of the most lines, UNKNOWN counted (with the most frequent other label beside it; ties to
    a named label, by name), its share of every line and its shares per basis (old lines: traced with a
    `gpu` object, else none when UNKNOWN, else host-only)."""
    pairs = []
    for line in step_lines(path):
        d = line["diagnosis"]
        basis = d.get("basis") or ("traced" if isinstance(line.get("gpu"), dict) else
                                   "none" if d["label"] == "UNKNOWN" else "host_only")
        pairs.append((d["label"], basis))
    known = [l for l, _ in pairs if l != "UNKNOWN"]
    label = min(set(known), key=lambda x: (-known.count(x), x))
    if len(pairs) - len(known) > known.count(label):
        return (f"<b>UNKNOWN</b> ({100 * (len(pairs) - len(known)) / len(pairs):.1f} % of the lines: nothing measured "
                f"to name a bottleneck from; the most frequent label of the others: {label} on "
                f"{100 * known.count(label) / len(pairs):.1f} %)")
    parts = [f"{100 * sum(1 for p in pairs if p == (label, b)) / len(pairs):.1f} % {b.replace('_', '-')}"
             for b in ("traced", "carried", "host_only") if (label, b) in pairs]
    return f"<b>{label}</b> ({100 * len([l for l in known if l == label]) / len(pairs):.1f} % of the lines: " + \
        ", ".join(parts) + ")"


def gap_problems(name, lines_path, page_text, sc, rows, bpp, width, height):
    """Untraced steps must be gaps in the GPU charts, never zeros. In the screenshot, the pixel column
    halfway between a traced step and an untraced neighbour must hold no series colour (a null drawn as
    0 puts the slope from the traced value down to 0 there, or a line along the axis); the traced step's
    own column must hold some (the check can see the chart). In the page's data, the GPU series are null
    exactly on the untraced steps."""
    problems = []
    traced = {l["global_step"]: isinstance(l.get("gpu"), dict) for l in step_lines(lines_path)}
    charts = {c["id"]: c for c in page_data(page_text)["charts"]}
    for cid, series in (("phases_gpu", None), ("nccl", None), ("utilization", "GPU utilization (busy share)")):
        for s in charts[cid]["series"]:
            if series in (None, s["name"]):
                wrong = [x for x, y in zip(charts[cid]["x"], s["y"]) if (y is None) == traced[x]]
                if wrong:
                    problems.append(f"{name}: {cid}/{s['name']}: null where traced or a value where not, steps {wrong[:5]}")
    steps = sorted(traced)
    for cid in ("phases_gpu", "nccl"):
        d = sc["drawn"].get(cid, {})
        if "plot" not in d:
            problems.append(f"{name}: chart {cid} was not drawn")
            continue
        left, top, right, bottom = d["plot"]
        x0, x1 = d["x"]
        X = lambda v: left + (v - x0) / (x1 - x0) * (right - left)  # axes() in the page
        column = lambda px: coloured(rows, bpp, (round(px), top, 1, bottom - top + 3), width, height)
        # A traced step's column, or the pixel beside it: the last step of a bar is its edge, drawn
        # antialiased (a light shade of some series' colour falls under the saturation threshold there).
        filled = [s for s in steps if traced[s] and max(column(X(s) + d) for d in (-1, 0, 1)) == 0]
        if filled:
            problems.append(f"{name}: {cid}: no colour at traced steps {filled[:5]} (the check would see nothing)")
        between = [(a, b) for a, b in zip(steps, steps[1:]) if traced[a] != traced[b]]
        painted = [(a, b, n) for a, b in between if (n := column((X(a) + X(b)) / 2)) > 0]
        if not between:
            problems.append(f"{name}: no untraced step beside a traced one: nothing to check")
        if painted:
            problems.append(f"{name}: {cid}: colour between traced and untraced steps (a null drawn as 0?): "
                            f"(step, step, pixels) {painted[:5]} of {len(between)}")
    return problems


def ranks_from(lines_path, out_dir, ranks):
    """`ranks` files from one rank's lines: rank r's step time x (1 + 0.02 r); the last rank 40 % slower
    in the second half (a straggler the report must point at)."""
    src = [json.loads(l) for l in open(lines_path) if l.startswith("{") and '"event"' not in l[:20]]
    paths = []
    for r in range(ranks):
        p = os.path.join(out_dir, f"steps-{r}.jsonl")
        with open(p, "w") as f:
            for i, line in enumerate(src):
                line = dict(line, rank=r, world_size=ranks)
                factor = 1 + 0.02 * r + (0.4 if r == ranks - 1 and i >= len(src) // 2 else 0)
                line["step_time_ms"] = line["step_time_ms"] * factor
                f.write(json.dumps(line) + "\n")
        paths.append(p)
    return paths


def check(name, lines, work, expect_data, must_slowest=None, screenshot_to=None, verdict=None, gaps=False,
          args=(), more=None, malformed=0, max_bytes=None):
    """`verdict`: the start of the header's verdict; `gaps`: untraced steps must be gaps (gap_problems);
    `args`: more options for steptrace-report; `more(page data, DOM, self-check, screenshot)`: more problems;
    `malformed`: the lines the page must say it skipped as malformed; `max_bytes`: the most the page may
    weigh (a bound by rule; how long the report takes is no verdict here, only a hang is: 300 s)."""
    problems = []
    page = os.path.join(work, name + ".html")
    t0 = time.time()
    try:
        out = subprocess.run([sys.executable, REPORT, *lines, "-o", page, *args], capture_output=True, text=True,
                             timeout=300)
    except subprocess.TimeoutExpired:
        return [f"{name}: steptrace-report did not end within 300 s"]
    took = time.time() - t0
    if out.returncode != 0 or "Traceback" in out.stderr:
        return [f"{name}: steptrace-report failed: {out.stderr.strip()[-500:]}"]
    size = os.path.getsize(page)
    if max_bytes is not None and size > max_bytes:
        return [f"{name}: the page is {size / 1e6:.1f} MB, want at most {max_bytes / 1e6:.1f} MB"]
    text = open(page, encoding="utf-8").read()
    if re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text):
        problems.append(f"{name}: the page refers to something over the network")
    profile = os.path.join(work, "profile-" + name)
    dom = browse(page, profile, "--window-size=1400,1000", "--dump-dom")
    m = re.search(r'<pre id="self-check">([^<]+)</pre>', dom.stdout)
    if not m:
        return problems + [f"{name}: the page's self-check did not run (Chromium exit {dom.returncode}; "
                           f"{dom.stderr.strip()[-400:]})"]
    sc = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    # No console message at all: the page writes none; one means a script error, a request the CSP
    # blocked, or code from the lines running (issue #33).
    console = [l for l in dom.stderr.splitlines() if "CONSOLE" in l]
    if sc["errors"] or console:
        problems.append(f"{name}: script errors or console messages: {sc['errors'] + console}")
    want_title = "steptrace report: " + ", ".join(os.path.basename(p) for p in lines[:3]) + \
        (f" and {len(lines) - 3} more" if len(lines) > 3 else "")
    m = re.search(r"<title>(.*?)</title>", dom.stdout, re.S)
    if "--title" not in args and (not m or html.unescape(m.group(1)) != want_title):
        problems.append(f"{name}: the page's title is {m and html.unescape(m.group(1))!r}, want {want_title!r}")
    said = page_data(text)["header"].get("malformed", 0)
    skipped = f"{malformed} line{'s' if malformed != 1 else ''} skipped: malformed"
    if said != malformed or (malformed and f'<p class="note">{skipped} (' not in dom.stdout):
        problems.append(f"{name}: the page skipped {said} line(s) as malformed, want {malformed} and the note "
                        f"{skipped!r} on the page")
    if sc["resources"]:
        problems.append(f"{name}: the page loaded {sc['resources']} resource(s)")
    for cid, d in sc["drawn"].items():
        if "empty" in d:
            if cid in expect_data:
                problems.append(f"{name}: chart {cid} is empty ({d['empty']}) but its lines have data")
            elif "null on every line: " not in d["empty"] and "no phase" not in d["empty"]:
                problems.append(f"{name}: chart {cid} is empty without a reason")
        elif d["pixels"] < 100:
            problems.append(f"{name}: chart {cid} drew {d['pixels']} coloured pixels")
    for cid in expect_data:
        if cid not in sc["drawn"]:
            problems.append(f"{name}: no chart {cid}")
    # A chart with nothing to draw is one line of the "Not measured" card, never a card of its own
    # holding only a sentence (a run without a GPU had five of those).
    empties = [d["empty"] for d in sc["drawn"].values() if "empty" in d]
    card = re.search(r'<div class="card" id="not-measured">(.*?)</div>', dom.stdout, re.S)
    if empties and (not card or card.group(1).count('<p class="empty">') != len(empties)):
        problems.append(f"{name}: {len(empties)} empty chart(s), not all in the not-measured card")
    if re.search(r'<div class="card"><h2>[^<]*</h2><p class="empty">', dom.stdout):
        problems.append(f"{name}: a card holds only a sentence")
    if must_slowest is not None and f"<td>{must_slowest}</td>" not in dom.stdout:
        problems.append(f"{name}: rank {must_slowest} is not listed among the slowest ranks")
    if verdict is not None:
        m = re.search(r'<div class="verdict" id="verdict"[^>]*>(.*?)</div>', dom.stdout, re.S)
        if not m or not m.group(1).startswith(verdict):
            problems.append(f"{name}: the verdict says {m.group(1) if m else None!r}, want it to start {verdict!r}")
    # The screenshot, as a person would see the page: every drawn chart's rectangle holds colour.
    height = int(sc["height"]) + 10
    png = os.path.join(work, name + ".png")
    shot = browse(page, profile, f"--window-size=1400,{height}", f"--screenshot={png}")
    if not os.path.exists(png):
        return problems + [f"{name}: no screenshot ({shot.stderr.strip()[-300:]})"]
    w, h, bpp, rows = png_pixels(png)
    grey = re.search(r'"none_color":"(#[0-9a-f]{6})"', text)
    for cid, d in sc["drawn"].items():
        if "rect" not in d:
            continue
        n = coloured(rows, bpp, d["rect"], w, h, grey.group(1) if grey and cid == "diagnosis" else None)
        if n < 100:
            problems.append(f"{name}: the screenshot shows {n} coloured pixels where chart {cid} is")
    if gaps:
        problems += gap_problems(name, lines[0], text, sc, rows, bpp, w, h)
    if more:
        problems += [f"{name}: {p}" for p in more(page_data(text), dom.stdout, sc, (rows, bpp, w, h))]
    print(f"report_check: {name}: {len(sc['drawn'])} charts, {sum(1 for d in sc['drawn'].values() if 'rect' in d)} "
          f"drawn, page {w}x{h}, {size / 1e6:.2f} MB written in {took:.1f} s")
    if screenshot_to:
        shutil.copyfile(png, screenshot_to)
    return problems


def page_data(text):
    """The data the page draws (its JSON script), as the report wrote it."""
    return json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S).group(1))


def iso(ms):
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{int(ms % 1000):03d}Z"


def appended_log(example, h100, work):
    """One log that several runs appended to: an old log's lines without run_id (the H100's, dated a day
    ago), then the example trainer run twice with the same STEPTRACE_LOG (40 steps, then 25: each run has
    its own run_id and counts global_step from 0 again). The log's path, or a problem."""
    log = os.path.join(work, "appended.jsonl")
    old = step_lines(h100)
    day_ago = time.time() * 1000 - 86400e3 - (old[-1]["start_unix_ms"] - old[0]["start_unix_ms"])
    with open(log, "w") as f:
        for line in old:
            ms = day_ago + line["start_unix_ms"] - old[0]["start_unix_ms"]
            f.write(json.dumps(dict(line, start_unix_ms=ms, timestamp=iso(ms))) + "\n")
    for steps in (40, 25):
        run = subprocess.run([example, "--steps", str(steps)], env=dict(os.environ, STEPTRACE_LOG=log),
                             capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            return None, f"runs: the example failed: {run.stderr[-400:]}"
    return log, None


def ranks_of_runs(h100, work):
    """2 ranks' files, each with two runs appended (the same run ids on both ranks, as rank 0 hands them
    out): the H100 lines (steps 0-23), then their first 16 as a later run (steps 4-19, an hour later) in
    which rank 1 is 40 % slower."""
    src = step_lines(h100)
    paths = []
    for r in range(2):
        p = os.path.join(work, f"runs-rank{r}.jsonl")
        with open(p, "w") as f:
            for rid, lines, shift, later in (("0123456789abcdef", src, 0, 0), ("fedcba9876543210", src[:16], 4, 3600e3)):
                for line in lines:
                    ms = line["start_unix_ms"] + later
                    f.write(json.dumps(dict(line, run_id=rid, rank=r, world_size=2, global_step=line["global_step"] + shift,
                                            start_unix_ms=ms, timestamp=iso(ms),
                                            step_time_ms=line["step_time_ms"] * (1.4 if r == 1 and later else 1))) + "\n")
                f.write(json.dumps({"event": "end", "schema": "steptrace.end/1", "run_id": rid, "rank": r}) + "\n")
        paths.append(p)
    return paths


def runs_of(paths):
    """The runs of these files, computed here from the lines, in the order they first appear: id ("?"
    without run_id) -> the first file's global_steps of it (in the file's order) and its lines in every file."""
    out = {}
    for i, path in enumerate(paths):
        for line in step_lines(path):
            r = out.setdefault(line.get("run_id") or "?", {"steps": [], "lines": 0})
            r["lines"] += 1
            if i == 0:
                r["steps"].append(line["global_step"])
    return out


def columns_of(shot, rect, rgb):
    """The screenshot's pixel columns inside rect (x0, y0, x1, y1) that hold the colour rgb (#rrggbb), or
    it blended with the white background (an antialiased line's edge), at least 30 % of it."""
    rows, bpp, width, height = shot
    want = [int(rgb[i:i + 2], 16) for i in (1, 3, 5)]
    dark = [k for k in range(3) if 255 - want[k] > 60]  # the channels that tell the blend's share
    cols = set()
    for y in range(max(0, int(rect[1])), min(height, int(rect[3]) + 1)):
        row = rows[y]
        for x in range(max(0, int(rect[0])), min(width, int(rect[2]) + 1)):
            if x in cols:
                continue
            px = row[x * bpp:x * bpp + 3]
            shares = [(255 - px[k]) / (255 - want[k]) for k in dark]
            a = sum(shares) / len(shares)
            if a >= 0.3 and max(shares) - min(shares) <= 0.15 and \
                    all(abs(px[k] - (a * want[k] + (1 - a) * 255)) <= 20 for k in range(3)):
                cols.add(x)
    return cols


def runs_shown(runs, shown):
    """more() for check(): a report of a log of several runs, showing run `shown` (an id, or "all")."""
    def more(data, dom, sc, shot):
        problems = []
        m = re.search(r'<div class="runs[^"]*" id="runs">(.*?)</div>', dom, re.S)
        said = html.unescape(m.group(1)) if m else ""
        if not said.startswith(f"{len(runs)} runs in these files"):
            problems.append(f"the header does not say {len(runs)} runs: {said!r}")
        for rid, r in runs.items():
            if not re.search(re.escape(rid) + "[^;]*global_step " +
                             f"{min(r['steps'])}–{max(r['steps'])}, {r['lines']} lines", said):
                problems.append(f"the header does not name run {rid} with its steps and lines: {said!r}")
        want = f"Shown: all {len(runs)} runs" if shown == "all" else f"Shown: {shown}"
        if want not in said or "--run ID" not in said:
            problems.append(f"the header does not say {want!r} and how to pick another (--run ID): {said!r}")
        st = {c["id"]: c for c in data["charts"]}["step_time"]
        drawn = sc["drawn"]["step_time"]
        if shown != "all":
            steps = runs[shown]["steps"]
            if any(b <= a for a, b in zip(st["x"], st["x"][1:])):
                problems.append(f"step time: a step goes back in the drawn series: {st['x']}")
            if st["x"] != steps or drawn.get("x") != [steps[0], steps[-1]]:
                problems.append(f"step time: steps {st['x'][:8]}… drawn over {drawn.get('x')}, want run {shown}'s "
                                f"{len(steps)} steps {steps[:8]}…")
            if len(st["series"]) != 1 or sum(v is not None for v in st["series"][0]["y"]) != len(steps):
                problems.append(f"step time: {len(st['series'])} series, want one with {len(steps)} points")
            return problems
        # Every run: one series each, its own colour, with a point exactly at each of the run's steps; in
        # the screenshot, a run's colour stays within its own steps (no line joins it to another run).
        if [s["name"] for s in st["series"]] != [f"run {rid}" for rid in runs] or \
                len({s["color"] for s in st["series"]}) != len(runs):
            problems.append(f"step time: series {[(s['name'], s['color']) for s in st['series']]}, want one per run "
                            f"{list(runs)}, each its own colour")
            return problems
        left, top, right, bottom = drawn["plot"]
        x0, x1 = drawn["x"]
        X = lambda v: left + (v - x0) / (x1 - x0) * (right - left)  # axes() in the page
        for s, (rid, r) in zip(st["series"], runs.items()):
            at = [x for x, y in zip(st["x"], s["y"]) if y is not None]
            if at != sorted(r["steps"]):
                problems.append(f"step time: run {rid}'s series has points at {at[:8]}…, want {sorted(r['steps'])[:8]}…")
            cols = columns_of(shot, (left, top, right, bottom), s["color"])
            lo, hi = X(min(r["steps"]) - 0.5), X(max(r["steps"]) + 0.5)
            outside = sorted(c for c in cols if c < lo or c > hi)
            if len(cols) < 20 or outside:
                problems.append(f"step time: run {rid}'s colour {s['color']} in {len(cols)} pixel columns, "
                                f"{len(outside)} outside its steps (x {lo:.0f}..{hi:.0f}): {outside[:6]}")
        return problems
    return more


def runs_checks(example, h100, work):
    """Logs that several runs appended to (issue #32): the latest run by default, --run ID, --run all,
    an unknown id, and two ranks' files each holding two runs."""
    log, problem = appended_log(example, h100, work)
    if problem:
        return [problem]
    runs = runs_of([log])
    ids = list(runs)
    if len(ids) != 3 or ids[0] != "?":
        return [f"runs: the test's log holds runs {ids}, want ? and the example's two"]
    problems = check("runs-latest", [log], work, ["step_time", "phases_host", "diagnosis"],
                     more=runs_shown(runs, ids[-1]))
    problems += check("runs-first", [log], work, ["step_time", "phases_host", "diagnosis"], args=("--run", ids[1]),
                      more=runs_shown(runs, ids[1]))
    problems += check("runs-old", [log], work, ["step_time", "phases_gpu", "utilization"], args=("--run", "?"),
                      more=runs_shown(runs, "?"))
    problems += check("runs-all", [log], work, ["step_time", "utilization"], args=("--run", "all"),
                      more=runs_shown(runs, "all"))
    out = subprocess.run([sys.executable, REPORT, log, "-o", os.path.join(work, "runs-bad.html"), "--run", "nosuchrun"],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 2 or "Traceback" in out.stderr or not all(rid in out.stderr for rid in ids):
        problems.append(f"runs: --run nosuchrun exits {out.returncode} (want 2, the ids listed, no traceback): "
                        f"{out.stderr.strip()[-600:]!r}")
    multi = ranks_of_runs(h100, work)
    mruns = runs_of(multi)
    problems += check("runs-ranks", multi, work, ["ranks", "slowest", "step_time"], must_slowest=1,
                      more=runs_shown(mruns, list(mruns)[-1]))
    return problems


# Markup the lines and the file names carry (issue #33): run, it changes the page's title and writes to
# the console. IMG has no "/", so files and directories can be named with it.
IMG = """<img src=x onerror="document.title='pwned';console.log('pwned img')">"""
SCRIPT = """</script><script>document.title='pwned';console.log('pwned script')</script>"""
COMMENT = "<!--<script>"
OUTSIDE = "(not linked: outside the log's directory)"


def as_text(s):
    """s as the DOM serialises it in a text node: markup shown, not parsed."""
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def visible(dom):
    """The page as Chromium serialised it, its scripts left out (their text is code and data, not what
    the page shows)."""
    return re.sub(r"<script\b[^>]*>.*?</script>", "", dom, flags=re.S)


def element(dom, eid):
    """What the page shows from the element eid to the next element with an id."""
    m = re.search(f'id="{eid}"[^>]*>(.*?)(?=<[^>]* id="|$)', visible(dom), re.S)
    return m.group(1) if m else ""


def injected(dom):
    """Elements the page does not make: a sign of markup parsed from the lines."""
    return [t for t in ("<img", "<svg", "<iframe") if t in dom.lower()] + \
        ([f"{dom.lower().count('<script')} <script> elements"] if dom.lower().count("<script") != 2 else [])


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for l in lines:
            f.write((l if isinstance(l, str) else json.dumps(l)) + "\n")
    return path


def xss_lines(h100, log_dir):
    """The H100's lines with markup in every string the report shows (types all as the schema says)."""
    out = []
    with open(os.path.join(log_dir, IMG + ".json"), "w") as f:
        f.write('{"traceEvents": []}')
    for i, line in enumerate(step_lines(h100)):
        line = json.loads(json.dumps(line))
        phases = line["phases"]
        phases[SCRIPT + COMMENT] = {"host_ms": 5.0, "count": 1, "gpu": {"busy_ms": 1.0, "top_kernels": [
            {"name": IMG, "ms": 1.0, "calls": 3}, {"name": SCRIPT, "ms": 0.5, "calls": 1}]}}
        phases["__proto__"] = {"host_ms": 0.5, "count": 1}
        line.update(run_id="r" + SCRIPT, hostname=IMG, job_id=COMMENT, estimated_mfu=None,
                    device=dict(line["device"], name=IMG + COMMENT))
        line["null_reasons"]["estimated_mfu"] = IMG + SCRIPT
        if i % 2:
            line["diagnosis"] = dict(line["diagnosis"], label=IMG, reason=SCRIPT)
        if i in (3, 4):
            line["trace"] = {"file": os.path.join(log_dir, IMG + ".json"), "reasons": [IMG, "slow_step"]}
        out.append(line)
    return out


def xss_more(data, dom, sc, shot):
    problems = [f"injected elements in the page: {injected(dom)}"] if injected(dom) else []
    legends = "".join(re.findall(r'<div class="legend">(.*?)</div>', visible(dom), re.S))
    where = {"the per-phase legend (phase name)": (legends, SCRIPT + COMMENT),
             "the kernel table (kernel name)": (element(dom, "top"), IMG),
             "the header (run_id)": (element(dom, "runs"), "r" + SCRIPT),
             "the header (GPU name, MFU null reason)": (element(dom, "kv"), IMG + COMMENT),
             "the header (MFU null reason)": (element(dom, "kv"), IMG + SCRIPT),
             "the verdict (label)": (element(dom, "verdict"), IMG),
             "the label table (label)": (element(dom, "labels"), IMG),
             "the trace table (file name)": (element(dom, "traces"), IMG + ".json</a>")}
    for what, (got, want) in where.items():
        if as_text(want).replace("&lt;/a&gt;", "</a>") not in got:
            problems.append(f"{what} does not show {want!r} as text")
    return problems


def malformed_lines(h100):
    """The H100's lines, then 20 lines of the wrong types (each a copy of a good line with one field
    spoilt). The report must skip and count these, never fail."""
    good = step_lines(h100)
    base = json.loads(json.dumps(good[5]))
    spoil = [lambda l: l.update(rank=IMG, trace={"file": "trace-x.json", "reasons": [IMG]}),
             lambda l: l.update(global_step=IMG, trace={"file": "trace-x.json", "reasons": []}),
             lambda l: l.update(global_step="5"), lambda l: l.update(global_step=-1),
             lambda l: l.update(global_step=1.5), lambda l: l.update(rank=True),
             lambda l: l.update(phases=[]), lambda l: l.update(phases=SCRIPT),
             lambda l: l["phases"].update(forward=[1, 2]),
             lambda l: l["phases"]["forward"]["gpu"]["top_kernels"][0].update(name={"a": IMG}),
             lambda l: l["phases"]["forward"]["gpu"]["top_kernels"][0].update(ms="1.5"),
             lambda l: l["diagnosis"].update(label=[IMG]), lambda l: l.update(step_time_ms="12.5"),
             lambda l: l.update(run_id={"id": IMG}), lambda l: l["null_reasons"].update(x={"y": IMG}),
             lambda l: l.update(trace={"file": {"f": IMG}}), lambda l: l["device"].update(name=[IMG]),
             lambda l: l.update(memory=IMG)]
    bad = []
    for f in spoil:
        line = json.loads(json.dumps(base))
        f(line)
        bad.append(line)
    text = json.dumps(base)
    bad.append(text.replace('"step_time_ms":', '"step_time_ms": NaN, "x":', 1))  # NaN
    bad.append(text[:-1] + ', "scalars_deep": ' + "[" * 5000 + "]" * 5000 + "}")  # nested too deeply
    assert len(bad) == 20
    return good + bad


def blowup_lines(h100, lines=1000, names=200):
    """`lines` lines, each with `names` phases (and kernels) of names no other line has."""
    base = step_lines(h100)[0]
    for i in range(lines):
        line = dict(base, global_step=i, start_unix_ms=base["start_unix_ms"] + 125.0 * i)
        line["phases"] = {f"phase-{i}-{j}": {"host_ms": (i * names + j) % 997 / 100 + 0.01, "count": 1, "gpu": {
            "busy_ms": (i + j) % 89 / 100, "top_kernels": [{"name": f"kernel-{i}-{j}", "ms": (i + j) % 89 / 100,
                                                            "calls": 1}]}} for j in range(names)}
        yield line


def blowup_more(data, dom, sc, shot):
    problems = []
    charts = {c["id"]: c for c in data["charts"]}
    for cid in ("phases_host", "phases_gpu"):
        names = [s["name"] for s in charts[cid]["series"]]
        if len(names) != 13 or not names[-1].startswith("other ("):
            problems.append(f"{cid}: {len(names)} series ({names[-3:]}), want the top 12 phases and one 'other'")
    if len(data["top_kernels"]) != 13 or any(len(k) > 8 for k in data["top_kernels"].values()):
        problems.append(f"the kernel table lists {len(data['top_kernels'])} phases, want 12 and one 'other', "
                        "8 kernels at most each")
    if "the 12 with the most host time over the run are drawn" not in element(dom, "notes"):
        problems.append("the page does not say that phases were folded into 'other'")
    return problems


def traces_more(log_dir, page_dir, want_linked, want_outside):
    def more(data, dom, sc, shot):
        problems = []
        table = element(dom, "traces")
        hrefs = re.findall(r"<a\b[^>]*\bhref=\"([^\"]*)\"", element(dom, "traces"), re.I)
        linked = set()
        for h in hrefs:
            target = unquote(html.unescape(h))
            real = os.path.realpath(os.path.join(page_dir, target))
            if not re.match(r"\.\.?/", target) or re.match(r"\s*javascript:", target, re.I) or \
                    os.path.commonpath([real, log_dir]) != log_dir or not real.endswith(".json"):
                problems.append(f"a link to {h!r} (want ./ or ../, a .json file inside {log_dir})")
            linked.add(os.path.basename(real))
        if linked != want_linked:
            problems.append(f"links to {sorted(linked)}, want {sorted(want_linked)}")
        for name in want_outside:
            if f"{as_text(name)} {OUTSIDE}" not in html.unescape(table).replace("<", "&lt;").replace(">", "&gt;") \
                    and f"{as_text(name)} {OUTSIDE}" not in table:
                problems.append(f"the trace table does not say {name!r} {OUTSIDE}")
        return problems
    return more


def hostile_checks(h100, work):
    """Issue #33: what hostile lines do to the report."""
    gpu_charts = ["step_time", "phases_host", "phases_gpu", "utilization", "memory", "diagnosis"]
    problems = []
    # 1, 2: markup in every string, and in the log's directory and file names.
    d = os.path.join(work, "logs" + COMMENT + IMG)
    os.mkdir(d)
    log = write_lines(os.path.join(d, "steps" + COMMENT + IMG + ".jsonl"), xss_lines(h100, d))
    problems += check("hostile-xss", [log], work, gpu_charts, more=xss_more)
    plain = write_lines(os.path.join(d, "steps" + COMMENT + ".jsonl"), step_lines(h100))
    problems += check("hostile-comment", [plain], work, gpu_charts,
                      more=lambda data, dom, sc, shot: [f"injected: {injected(dom)}"] if injected(dom) else [])
    # 1: a rank that is markup, on a line with a trace (the report used to put it in the trace table as is).
    lines = step_lines(h100)
    lines.append(dict(lines[7], rank=IMG, trace={"file": "trace-x.json", "reasons": ["slow_step"]}))
    log = write_lines(os.path.join(work, "rank.jsonl"), lines)
    problems += check("hostile-rank", [log], work, gpu_charts, malformed=1,
                      more=lambda data, dom, sc, shot: [f"injected: {injected(dom)}"] if injected(dom) else [])
    # 1: lines of the wrong types: skipped and counted, never a traceback.
    log = write_lines(os.path.join(work, "malformed.jsonl"), malformed_lines(h100))
    problems += check("hostile-malformed", [log], work, gpu_charts, malformed=20,
                      more=lambda data, dom, sc, shot: [f"injected: {injected(dom)}"] if injected(dom) else [])
    # 1: stall/resumed/end records of the wrong types or sizes, and markup in what they say: marked where
    # they make sense, never a traceback, nothing injected.
    lines = step_lines(h100)
    who = {k: lines[0][k] for k in ("run_id", "rank") if k in lines[0]}  # the lines' run and rank
    events = [dict(who, event="stall", open_step=3, threads=5), dict(who, event="stall", open_step=10 ** 400),
              dict(who, event="stall", open_step=4, stalled_s=1e300,
                   threads=[{"step_thread": True, "open_phases": 3}, {"step_thread": True, "open_phases": [{"phase": IMG}]}]),
              dict(who, event="resumed", open_step=5, stalled_step=10 ** 400, stalled_s="long"),
              dict(who, event="end", last_global_step=[IMG], reason=IMG), dict(who, event="end", last_global_step=6, reason={"a": 1})]
    log = write_lines(os.path.join(work, "events.jsonl"), lines + events)
    problems += check("hostile-events", [log], work, gpu_charts,
                      more=lambda data, dom, sc, shot: ([f"injected: {injected(dom)}"] if injected(dom) else []) +
                      ([] if sorted((m["kind"], m["x"]) for m in data["marks"]) ==
                       [("end", 6), ("resumed", 5), ("stall", 3), ("stall", 4)] else [f"marks {data['marks']}"]))
    # 3: 1 000 lines of 200 new phase names each: seconds, a bounded page.
    log = write_lines(os.path.join(work, "blowup.jsonl"), blowup_lines(h100))
    problems += check("hostile-blowup", [log], work, ["step_time", "phases_host", "phases_gpu"],
                      max_bytes=5_000_000, more=blowup_more)
    # 4: trace paths: linked only inside the log's directory, as a relative link to a .json file.
    d = os.path.join(work, "tracelogs")
    os.mkdir(d)
    js = "javascript:alert(document.title='pwned').json"
    for name in ("trace-good-r0-s1.json", js, "notes.txt"):
        with open(os.path.join(d, name), "w") as f:
            f.write('{"traceEvents": []}')
    with open(os.path.join(work, "outside.json"), "w") as f:
        f.write("{}")
    os.symlink(os.path.join(work, "outside.json"), os.path.join(d, "trace-link.json"))
    files = ["/etc/passwd", os.path.join(work, "outside.json"), os.path.join(d, "..", "outside.json"),
             os.path.join(d, "trace-link.json"), "javascript:alert(document.title='pwned')", os.path.join(d, js),
             "trace-good-r0-s1.json", os.path.join(d, "notes.txt")]
    lines = step_lines(h100)
    for i, f in enumerate(files):
        lines[i + 2] = dict(lines[i + 2], trace={"file": f, "reasons": ["slow_step"]})
    log = write_lines(os.path.join(d, "steps.jsonl"), lines)
    problems += check("hostile-traces", [log], work, gpu_charts,
                      more=traces_more(os.path.realpath(d), work, {"trace-good-r0-s1.json", js},
                                       ["passwd", "outside.json", "trace-link.json"]))
    return problems


def stall_more(log):
    """The stall, resumed and end records of `log` are marked: in the page's data, the table below the
    charts, the header, and each step chart's legend."""
    records = [json.loads(l) for l in open(log) if '"event"' in l]
    kinds = [r["event"] for r in records if r["event"] in ("stall", "resumed", "end")]

    def more(data, dom, sc, shot):
        problems = []
        if "stall" not in kinds or "resumed" not in kinds or "end" not in kinds:
            return [f"the run wrote {kinds}: want stall, resumed and end records (the check's premise)"]
        # One mark per record, at the record's step (the open step; the end record's last step).
        want = sorted((r["event"], r["last_global_step"] if r["event"] == "end" else r["open_step"])
                      for r in records if r["event"] in ("stall", "resumed", "end"))
        marked = sorted((m["kind"], m["x"]) for m in data["marks"])
        if marked != want:
            problems.append(f"marks {marked}, want one per record at its step {want}")
        table = element(dom, "marks") or ""
        for k in set(kinds):
            if f"<td>{k}</td>" not in table:
                problems.append(f"the records' table has no {k} row")
        stalled = sorted({r["open_step"] for r in records if r["event"] == "stall"})
        if not data["header"]["stalls"].startswith(f"{kinds.count('stall')} stall record(s) at step(s) "
                                                   + ", ".join(str(s) for s in stalled)):
            problems.append(f"the header says stalls {data['header']['stalls']!r}")
        if "stop" not in data["header"]["endings"]:
            problems.append(f"the header says ended {data['header']['endings']!r}, want stop")
        if dom.count("dashed: ") < 2:
            problems.append("the step charts' legends do not name the dashed marks")
        return problems
    return more


def standard_checks(build, h100, keep, work):
    """The reports of real lines: the H100's, the diagnosis basis, the example's, runs, traces, ranks."""
    gpu_charts = ["step_time", "tokens", "mfu", "phases_host", "phases_gpu", "utilization", "memory", "nccl",
                  "diagnosis"]
    problems = []
    problems += check("h100", [h100], work, gpu_charts, screenshot_to=keep, verdict=expected_verdict(h100))
    # The diagnosis basis: lines without it (as an H100 wrote them: 15 of 80 steps traced, the others
    # UNKNOWN), and the same lines in the new schema (the others carried COMPUTE-BOUND).
    budget = os.path.join(ROOT, "tests", "data", "h100_transformer_budget_lines.jsonl")
    carried = with_basis(budget, os.path.join(work, "carried.jsonl"))
    for case, path in (("basis-old", budget), ("basis-carried", carried)):
        want = expected_verdict(path)
        # Old lines: 65 of 80 untraced UNKNOWN (the most): UNKNOWN, COMPUTE-BOUND named beside it.
        # The new schema: the untraced lines carry COMPUTE-BOUND.
        if ("COMPUTE-BOUND" not in want or want.startswith("<b>UNKNOWN</b>") != (case == "basis-old")
                or (case == "basis-carried") != ("carried" in want)):
            problems.append(f"{case}: the test's own expectation is wrong: {want}")
        problems += check(case, [path], work, ["step_time", "phases_gpu", "utilization", "nccl", "diagnosis"],
                          verdict=want, gaps=True)
    demo_log = os.path.join(work, "demo.jsonl")
    example = os.path.join(build, "examples", "mlp_train")
    env = dict(os.environ, STEPTRACE_LOG=demo_log)
    run = subprocess.run([example, "--steps", "40"], env=env, capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        problems.append(f"demo: the example failed: {run.stderr[-400:]}")
    else:
        problems += check("demo", [demo_log], work, ["step_time", "phases_host", "diagnosis"])
        problems += runs_checks(example, h100, work)
    # The same program with line_detail=compact (run records, steptrace.step/2 lines): the same charts.
    compact_log = os.path.join(work, "compact.jsonl")
    run = subprocess.run([example, "--steps", "40"], env=dict(os.environ, STEPTRACE_LOG=compact_log,
                                                               STEPTRACE_LINE_DETAIL="compact"),
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        problems.append(f"compact: the example failed: {run.stderr[-400:]}")
    elif '"schema":"steptrace.step/2"' not in open(compact_log).read():
        problems.append("compact: the example wrote no compact line")
    else:
        problems += check("compact", [compact_log], work, ["step_time", "phases_host", "diagnosis"])
    # A real stall: the example's first step waits 0.7 s for its loader while the watchdog's threshold is
    # 0.3 s (before any step has closed it is stall_after_s): stall records, a resumed record, an end record.
    stall_log = os.path.join(work, "stall.jsonl")
    env = dict(os.environ, STEPTRACE_LOG=stall_log, STEPTRACE_STALL_AFTER_S="0.3")
    run = subprocess.run([example, "--cpu", "--steps", "4", "--slow-loader-ms", "700"], env=env, capture_output=True,
                         text=True, timeout=300)
    if run.returncode != 0:
        problems.append(f"stall: the example failed: {run.stderr[-400:]}")
    else:
        problems += check("stall", [stall_log], work, ["step_time", "phases_host"], more=stall_more(stall_log))
    feed_dir = os.path.join(work, "feed")
    os.mkdir(feed_dir)
    subprocess.run([os.path.join(build, "tests", "trace_feed"), feed_dir, "60"], check=True, capture_output=True,
                   timeout=120)
    problems += check("traces", [os.path.join(feed_dir, "steps.jsonl")], work, ["step_time", "phases_gpu"])
    page = open(os.path.join(work, "traces.html"), encoding="utf-8").read()
    links = re.findall(r'href=\\"([^"\\]+\.json)\\"|"href":"([^"]+\.json)"', page)
    linked = {a or b for a, b in links}
    traces = {f for f in os.listdir(feed_dir) if f.startswith("trace-")}
    # The captures the program asked for (STEPTRACE_CAPTURE_STEPS=30-31, capture_steps(1) in step 50)
    # always go out; the slow step's automatic one may be refused by the capture budget or held back by
    # the rate limit on a loaded machine (trace_check.py tells those apart): every one written is linked.
    if {os.path.basename(l) for l in linked} != traces or len(traces) < 2:
        problems.append(f"traces: the report links {sorted(linked)}, the run wrote {sorted(traces)}")
    for ranks in (4, 16):
        d = os.path.join(work, f"ranks{ranks}")
        os.mkdir(d)
        problems += check(f"ranks{ranks}", ranks_from(h100, d, ranks), work, ["ranks", "slowest"],
                          must_slowest=ranks - 1)
    # Two ranks of a DDP job on 2 H200s (python/tests/test_watch_gpu.py, session 59), rank 1's batch fetch
    # slowed 20 ms, its first 24 steps: the page opens with rank 1 and its input, draws each rank's wait
    # and own work, and names the slowest by own work (their step times agree).
    ddp = [os.path.join(ROOT, "tests", "data", f"h200x2_ddp_rank1_slowed-{r}.jsonl") for r in (0, 1)]

    def held_back(data, dom, sc, shot):
        out = []
        m = re.search(r'<div class="verdict" id="heldback"[^>]*>(.*?)</div>', dom, re.S)
        text = html.unescape(re.sub(r"<[^>]+>", "", m.group(1))) if m else ""
        if not text.startswith("Held the step back: rank 1, in input"):
            out.append(f"the page does not open with rank 1 and its input: {text[:200]!r}")
        if dom.find('id="heldback"') > dom.find('id="verdict"'):
            out.append("the held-back verdict is not the first")
        hb = data.get("held_back") or {}
        top = (hb.get("culprits") or [{}])[0]
        if not (top.get("rank") == 1 and top.get("share", 0) >= 0.9 and 15 < (top.get("wait_gap_ms") or 0) < 40):
            out.append(f"held_back: {hb}")
        rows = {r["rank"]: r for r in (data.get("rank_phases") or {}).get("rows", [])}
        if not (rows.get(0, {}).get("wait_ms") or 0) > (rows.get(1, {}).get("wait_ms") or 0) + 10:
            out.append(f"rank x phase: rank 0 should wait ~20 ms more than rank 1: {rows}")
        if "<th>own work</th>" not in dom:
            out.append("no rank x phase table on the page")
        return out
    problems += check("ddp-held-back", ddp, work, ["ranks", "rank_wait", "rank_work", "slowest"], must_slowest=1,
                      more=held_back)
    # The same two ranks as the default writes them (run records and compact lines: tests/compact_log.cpp):
    # the report of a default log draws every GPU chart from the compact lines alone, the markers' per-phase
    # spans of untraced lines included, and opens with the same rank (issue #61).
    compact_ddp = []
    for r, path in enumerate(ddp):
        out = os.path.join(work, f"ddp-compact-{r}.jsonl")
        subprocess.run([os.path.join(build, "tests", "compact_log"), path, out], check=True, capture_output=True,
                       timeout=120)
        records = [json.loads(l) for l in open(out, encoding="utf-8") if l.strip()]
        if not (records and records[0].get("event") == "run"
                and all(r.get("schema") == "steptrace.step/2" for r in records if "event" not in r)):
            problems.append(f"ddp-compact: {out} is not a compact log (a run record first, step/2 lines)")
        compact_ddp.append(out)
    problems += check("ddp-compact", compact_ddp, work, ["step_time", "phases_host", "phases_gpu", "phases_markers",
                                                         "utilization", "diagnosis", "ranks", "rank_wait",
                                                         "rank_work", "slowest"],
                      must_slowest=1, more=held_back)
    return problems


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    build = argv[0]
    keep = argv[argv.index("--screenshot") + 1] if "--screenshot" in argv else None
    only_hostile = "--only" in argv and argv[argv.index("--only") + 1:][:1] == ["hostile"]
    h100 = os.path.join(ROOT, "tests", "data", "h100_mlp_lines.jsonl")
    with tempfile.TemporaryDirectory() as work:
        problems = hostile_checks(h100, work)
        if not only_hostile:
            problems += standard_checks(build, h100, keep, work)
    for p in problems:
        print("report_check: FAIL:", p)
    print("report_check:", "ok" if not problems else f"{len(problems)} problem(s)")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
