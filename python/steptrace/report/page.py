"""The page steptrace-report writes: its HTML, CSS and script, in one string. steptrace.report's render
puts the escaped title at __TITLE__ and the data (guard.embed) at __DATA__."""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>__TITLE__</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#fafafa;color:#222}
header{background:#1d2733;color:#eee;padding:14px 24px}
header h1{font-size:20px;margin:0 0 6px}
header .kv{display:flex;flex-wrap:wrap;gap:6px 22px}
header .kv b{color:#fff}
header .runs{margin-top:6px;font-size:13px;color:#c9d3de}
header .runs.several{color:#ffd58a}
main{padding:12px 24px;max-width:1400px}
.verdict{background:#fff;border-left:6px solid #888;padding:10px 14px;margin:12px 0}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(620px,1fr));gap:14px}
.card{background:#fff;border:1px solid #ddd;border-radius:4px;padding:10px 12px}
.card h2{font-size:15px;margin:0 0 6px}
.card canvas{width:100%;height:220px;display:block}
.legend{font-size:12px;color:#444;margin-top:4px}
.legend span{display:inline-block;margin-right:12px}
.legend i{display:inline-block;width:10px;height:10px;margin-right:4px;vertical-align:middle}
.note{font-size:12px;color:#666}
.empty{color:#555;font-size:13px}
table{border-collapse:collapse;font-size:12px;width:100%}
td,th{border-bottom:1px solid #eee;padding:3px 6px;text-align:left;vertical-align:top}
td:first-child{word-break:break-all}
td.n{text-align:right;font-variant-numeric:tabular-nums}
#tip{position:fixed;pointer-events:none;background:#222;color:#fff;font-size:12px;padding:4px 6px;border-radius:3px;display:none;white-space:pre}
#self-check{display:none}
</style></head><body>
<header><h1 id="title"></h1><div class="kv" id="kv"></div><div class="runs" id="runs"></div></header>
<main>
<div class="verdict" id="heldback" style="display:none"></div>
<div class="verdict" id="verdict"></div>
<div id="notes"></div>
<div class="grid" id="charts"></div>
<div class="grid" style="margin-top:14px">
<div class="card"><h2>Top kernels per phase</h2><div class="note">GPU time summed over each line's top 5 kernels of each phase (every rank's lines).</div><div id="top"></div></div>
<div class="card"><h2>Diagnosis labels</h2><div id="labels"></div><h2 style="margin-top:12px">Slowest ranks</h2><div id="slowranks"></div></div>
<div class="card" id="rankphases-card" style="display:none"><h2>Rank × phase</h2><div class="note">Each rank's mean host time per phase (self time, ms per line), its median step time, collective wait and own work (rank_wait: iteration less wait; the rank with the most is the one the others wait for).</div><div id="rankphases"></div></div>
<div class="card"><h2>Stalls and endings</h2><div class="note">The stall watchdog's records (a step that did not end in time, and when it resumed) and the end records (docs/schema.md), dashed on every step chart (S, R, E).</div><div id="marks"></div></div>
<div class="card"><h2>Traces of the steps that matter</h2><div class="note">Written by the flight recorder (docs/schema.md). Open one in chrome://tracing or ui.perfetto.dev.</div><div id="traces"></div></div>
</div>
<p class="note" id="footer"></p>
</main>
<div id="tip"></div>
<pre id="self-check"></pre>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
(function () {
const errors = [];
window.addEventListener("error", e => errors.push(String(e.message)));
const D = JSON.parse(document.getElementById("data").textContent);
const $ = id => document.getElementById(id);
// Every text from the lines goes into the DOM through esc() (or textContent); colours by own key only.
const esc = s => String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const own = (o, k) => Object.prototype.hasOwnProperty.call(o, k) ? o[k] : undefined;
const fmt = (v, d) => v === null || v === undefined ? "null" :
  Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(2) : (+v.toFixed(d === undefined ? 3 : d)).toString();

function niceTicks(lo, hi, n) {
  if (!(hi > lo)) { hi = lo + 1; }
  const raw = (hi - lo) / n, p = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map(m => m * p).find(s => s >= raw);
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
  return out;
}

function frame(cv, c) {
  const dpr = window.devicePixelRatio || 1, w = cv.clientWidth, h = cv.clientHeight;
  cv.width = Math.round(w * dpr); cv.height = Math.round(h * dpr);
  const g = cv.getContext("2d");
  g.scale(dpr, dpr);
  g.fillStyle = "#fff"; g.fillRect(0, 0, w, h);
  return c.frame = {g, w, h, L: 62, R: 12, T: 10, B: 26};
}

function axes(f, xs, ylo, yhi, unit, noYTicks) {
  const {g, w, h, L, R, T, B} = f;
  const x0 = xs[0], x1 = xs[xs.length - 1] === x0 ? x0 + 1 : xs[xs.length - 1];
  const X = v => L + (v - x0) / (x1 - x0) * (w - L - R);
  const Y = v => h - B - (v - ylo) / (yhi - ylo) * (h - T - B);
  g.font = "11px system-ui,sans-serif"; g.strokeStyle = "#e6e6e6"; g.fillStyle = "#666"; g.lineWidth = 1;
  if (!noYTicks) for (const t of niceTicks(ylo, yhi, 4)) {
    g.beginPath(); g.moveTo(L, Y(t)); g.lineTo(w - R, Y(t)); g.stroke();
    g.textAlign = "right"; g.fillText(fmt(t), L - 4, Y(t) + 4);
  }
  for (const t of niceTicks(x0, x1, 6).filter(Number.isInteger)) {  // steps: whole numbers only
    g.textAlign = "center"; g.fillText(String(t), X(t), h - B + 14);
  }
  g.strokeStyle = "#999"; g.beginPath(); g.moveTo(L, T); g.lineTo(L, h - B); g.lineTo(w - R, h - B); g.stroke();
  g.save(); g.translate(12, (h - B + T) / 2); g.rotate(-Math.PI / 2); g.textAlign = "center"; g.fillText(unit, 0, 0); g.restore();
  g.textAlign = "right"; g.fillText("global_step", w - R, h - 2);
  return {X, Y};
}

function range(c, stacked) {
  let lo = Infinity, hi = -Infinity;
  const n = c.x.length;
  for (let i = 0; i < n; i++) {
    let sum = 0;
    for (const s of c.series) {
      const v = s.y[i];
      if (v === null) continue;
      if (stacked) { sum += v; continue; }
      lo = Math.min(lo, v, s.lo && s.lo[i] !== null ? s.lo[i] : v);
      hi = Math.max(hi, v, s.hi && s.hi[i] !== null ? s.hi[i] : v);
    }
    if (stacked) { lo = Math.min(lo, 0); hi = Math.max(hi, sum); }
  }
  if (lo >= 0) lo = 0;
  // A few outliers (the first step's warm-up) would flatten the rest: the axis stops at 1.5 x the
  // 95th percentile when the maximum is above 3 x it; the points above are drawn as marks on the top edge.
  {
    const vals = [];
    if (stacked) c.x.forEach((_, i) => { if (!gap(c, i)) vals.push(c.series.reduce((a, s) => a + (s.y[i] || 0), 0)); });
    else for (const s of c.series) for (const v of s.y) if (v !== null) vals.push(v);
    vals.sort((a, b) => a - b);
    const p95 = vals.length ? vals[Math.floor(0.95 * (vals.length - 1))] : 0;
    if (p95 > 0 && hi > 3 * p95) { hi = 1.5 * p95; c.clippedAt = hi; }
  }
  if (c.ymax !== undefined) hi = Math.max(c.ymax, hi);
  if (!(hi > lo)) hi = lo + 1;
  return [lo, hi * 1.04];
}

// A point where every series is null: a step without the value (e.g. not traced), never a zero.
const gap = (c, i) => c.series.every(s => s.y[i] === null);

// Runs of consecutive non-null indices of ys, as [first, last].
function runs(ys) {
  const out = [];
  ys.forEach((v, i) => {
    if (v === null) return;
    if (out.length && out[out.length - 1][1] === i - 1) out[out.length - 1][1] = i; else out.push([i, i]);
  });
  return out;
}

function drawLine(cv, c) {
  const f = frame(cv, c), g = f.g, stacked = c.kind === "stacked";
  const [lo, hi] = range(c, stacked);
  const axis = axes(f, c.x, lo, hi, c.unit), X = axis.X;
  const Y = v => axis.Y(Math.min(v, hi));
  const base = c.x.map(() => 0);
  // A point alone between gaps has no segment to draw: it gets a bar (stacked) or a dot (lines).
  const dx = c.x.length > 1 ? (X(c.x[c.x.length - 1]) - X(c.x[0])) / (c.x.length - 1) : 12;
  const barW = Math.max(1, Math.min(6, 0.5 * dx));  // half the spacing: a gap stays visible beside it
  for (const s of c.series) {
    if (s.lo) {  // min..max band of downsampled buckets, broken where a bucket had no value
      g.fillStyle = s.color + "33";
      for (const [a, b] of runs(s.lo)) {
        g.beginPath();
        for (let i = a; i <= b; i++) i === a ? g.moveTo(X(c.x[i]), Y(s.hi[i])) : g.lineTo(X(c.x[i]), Y(s.hi[i]));
        for (let i = b; i >= a; i--) g.lineTo(X(c.x[i]), Y(s.lo[i]));
        g.fill();
      }
    }
    if (stacked) {  // one polygon per run of known points; a null leaves its stack empty
      const top = c.x.map((_, i) => s.y[i] === null || base[i] === null ? null : base[i] + s.y[i]);
      g.fillStyle = s.color + "cc";
      for (const [a, b] of runs(top)) {
        if (a === b) { g.fillRect(X(c.x[a]) - barW / 2, Y(top[a]), barW, Y(base[a]) - Y(top[a])); continue; }
        g.beginPath();
        for (let i = a; i <= b; i++) i === a ? g.moveTo(X(c.x[i]), Y(top[i])) : g.lineTo(X(c.x[i]), Y(top[i]));
        for (let i = b; i >= a; i--) g.lineTo(X(c.x[i]), Y(base[i]));
        g.closePath(); g.fill();
      }
      top.forEach((v, i) => base[i] = v);
      continue;
    }
    g.strokeStyle = s.color; g.lineWidth = 1.6; g.beginPath();
    const spans = runs(s.y);
    for (const [a, b] of spans) for (let i = a; i <= b; i++) i === a ? g.moveTo(X(c.x[i]), Y(s.y[i])) : g.lineTo(X(c.x[i]), Y(s.y[i]));
    g.stroke();
    g.fillStyle = s.color;
    if (c.clippedAt !== undefined) c.x.forEach((xv, i) => {
      if (s.y[i] === null || s.y[i] <= c.clippedAt) return;
      g.beginPath(); g.moveTo(X(xv) - 4, f.T + 7); g.lineTo(X(xv) + 4, f.T + 7); g.lineTo(X(xv), f.T); g.fill();
    });
    if (c.x.length < 200) c.x.forEach((xv, i) => { if (s.y[i] !== null) g.fillRect(X(xv) - 1.5, Y(s.y[i]) - 1.5, 3, 3); });
    else for (const [a, b] of spans) if (a === b) g.fillRect(X(c.x[a]) - 1.5, Y(s.y[a]) - 1.5, 3, 3);
  }
  drawMarks(f, c, X);
  return X;
}

// Stall, resumed and end records: a dashed line at their step, a letter on top (S, R, E).
// Greys (and letters), so that a mark is never taken for a series or counted as a chart's data.
const MARK = {stall: ["#111111", "S"], resumed: ["#666666", "R"], end: ["#999999", "E"]};
function drawMarks(f, c, X) {
  const {g, h, T, B} = f, lo = c.x[0], hi = c.x[c.x.length - 1];
  c.marks = D.marks.filter(m => m.x >= lo && m.x <= hi);
  g.save(); g.setLineDash([4, 3]); g.lineWidth = 1.2; g.font = "bold 10px system-ui,sans-serif"; g.textAlign = "center";
  for (const m of c.marks) {
    const [color, letter] = own(MARK, m.kind) || ["#999", "?"], x = X(m.x);
    g.strokeStyle = color; g.fillStyle = color;
    g.beginPath(); g.moveTo(x, T + 10); g.lineTo(x, h - B); g.stroke();
    g.fillText(letter, x, T + 9);
  }
  g.restore();
}

// The label's colour for its own (traced or host-only) diagnosis, a lighter one when carried, grey for none.
const stripColor = (c, lab, shade) =>
  shade === "none" ? c.none_color : own(shade === "carried" ? c.carried_colors : c.colors, lab) || "#999";
const shadeName = (lab, shade) => shade === "none" ? "nothing known (" + lab + ")" : shade === "carried" ? lab + " (carried)" : lab;

function drawStrip(cv, c) {
  const f = frame(cv, c), g = f.g;
  f.B = 26;
  const {X} = axes(f, c.x, 0, 1, "", true);
  const w = c.x.length > 1 ? (X(c.x[c.x.length - 1]) - X(c.x[0])) / (c.x.length - 1) : 20;
  c.labels.forEach((lab, i) => {
    if (lab === null) return;
    g.fillStyle = stripColor(c, lab, c.shades[i]);
    g.fillRect(X(c.x[i]) - w / 2, f.T + 20, Math.max(1, w + 0.5), f.h - f.T - f.B - 40);
  });
  return X;
}

function drawHeat(cv, c) {
  const f = frame(cv, c), g = f.g;
  const {X} = axes(f, c.x, 0, c.rows.length, "ranks", true);
  // Colour: a rank's step time over the ranks' median at that point (1 = blue, >= 1.3 = red), so a
  // straggler shows whatever the run's phases do to everyone's step time.
  const med = c.med || c.x.map((_, i) => {
    const v = c.z.map(row => row[i]).filter(v => v !== null).sort((a, b) => a - b);
    return v.length ? v[Math.floor((v.length - 1) / 2)] : null;
  });
  const lo = 1, hi = 1.3;
  const rh = (f.h - f.T - f.B) / c.rows.length;
  const w = c.x.length > 1 ? (X(c.x[c.x.length - 1]) - X(c.x[0])) / (c.x.length - 1) : 20;
  c.z.forEach((row, r) => row.forEach((v, i) => {
    if (v === null || !med[i]) return;
    v = v / med[i];
    const t = hi > lo ? Math.min(1, Math.max(0, (v - lo) / (hi - lo))) : 0.5;
    g.fillStyle = `rgb(${Math.round(40 + 215 * t)},${Math.round(90 + 60 * (1 - t))},${Math.round(200 * (1 - t))})`;
    g.fillRect(X(c.x[i]) - w / 2, f.T + r * rh, Math.max(1, w + 0.5), Math.max(1, rh));
  }));
  c.legendText = "colour: the rank's step time over the ranks' median at that point: blue ≤ 1, red ≥ 1.3";
  return X;
}

// Saturated pixels: series colours (axes, grid and text are grey); and pixels of `grey` (#rrggbb), a
// data colour that is grey (the strip's basis none).
function dataPixels(cv, grey) {
  const g = cv.getContext("2d"), img = g.getImageData(0, 0, cv.width, cv.height).data;
  const k = grey ? [1, 3, 5].map(i => parseInt(grey.slice(i, i + 2), 16)) : null;
  let n = 0;
  for (let i = 0; i < img.length; i += 4) {
    const mx = Math.max(img[i], img[i + 1], img[i + 2]), mn = Math.min(img[i], img[i + 1], img[i + 2]);
    if (mx - mn > 40 || (k && img[i] === k[0] && img[i + 1] === k[1] && img[i + 2] === k[2])) n++;
  }
  return n;
}

function tooltip(cv, c, X) {
  const tip = $("tip");
  cv.addEventListener("mousemove", ev => {
    const r = cv.getBoundingClientRect(), px = ev.clientX - r.left;
    let best = 0;
    c.x.forEach((xv, i) => { if (Math.abs(X(xv) - px) < Math.abs(X(c.x[best]) - px)) best = i; });
    let text = "global_step " + c.x[best];
    if (c.series) for (const s of c.series) text += "\\n" + s.name + ": " + fmt(s.y[best]) + (s.tags && s.tags[best] !== null ? " (rank " + s.tags[best] + ")" : "");
    if (c.labels) text += "\\n" + c.labels[best];
    if (c.rows) text += "\\n" + c.rows.map((r, k) => r + ": " + fmt(c.z[k][best])).slice(0, 12).join("\\n");
    tip.textContent = text; tip.style.display = "block";
    tip.style.left = (ev.clientX + 12) + "px"; tip.style.top = (ev.clientY + 12) + "px";
  });
  cv.addEventListener("mouseleave", () => tip.style.display = "none");
}

const H = D.header;
document.title = H.title;
$("title").textContent = H.title;
const kv = [["run", H.run], ["GPU", H.gpus.join(", ")], ["ranks", H.ranks],
  ["steps", H.steps + " (" + H.first_step + "–" + H.last_step + ")"], ["lines", H.lines],
  ["step time", fmt(H.step_time_median_ms, 2) + " ms median, " + fmt(H.step_time_p90_ms, 2) + " ms p90"],
  ["tokens/s", H.tokens_per_second_median === null ? "n/a (no line had tokens set)" : fmt(H.tokens_per_second_median, 0) + " median"],
  ["MFU", H.mfu_median === null ? "null (" + H.mfu_null + ")" : fmt(H.mfu_median * 100, 1) + " % median"],
  ["stalls", H.stalls], ["ended", H.endings]];
$("kv").innerHTML = kv.map(([k, v]) => `<span>${esc(k)}: <b>${esc(v)}</b></span>`).join("");
$("runs").textContent = H.runs_text;
if (H.run_count > 1) $("runs").className = "runs several";
const vb = $("verdict");
vb.style.borderLeftColor = own((D.charts.find(c => c.kind === "strip") || {colors: {}}).colors, H.dominant) || "#888";
vb.innerHTML = `<b>${esc(H.dominant)}</b> (${esc(H.basis_text)}). ${esc(H.advice)}`;
$("notes").innerHTML = D.notes.map(n => `<p class="note">${esc(n)}</p>`).join("");
// Who held the step back: rank 0's cross-rank views (the rank the others wait for, from measured waits).
const HB = D.held_back;
if (HB) {
  const hb = $("heldback"), c = HB.culprits[0];
  hb.style.display = "";
  hb.style.borderLeftColor = HB.judged && HB.balanced === HB.judged ? "#4a4" : "#c44";
  const part = c && c.phase ? `, in <b>${esc(c.phase)}</b> (${esc(c.phase_views)} of its ${esc(c.views)} views)` : "";
  const w = c ? (c.wait_gap_ms !== null ? c.wait_gap_ms : c.gap_ms) : null;  // the median rank's wait beyond the culprit's
  const cost = w !== null ? `: the median rank waits ${esc(fmt(w, 2))} ms a step for it` : "";
  hb.innerHTML = (c ? `<b>Held the step back: rank ${esc(c.rank)}</b>${part}${cost}, named on ${esc(fmt(c.share * 100, 0))} % of ` +
    `${esc(HB.views)} cross-rank views (steps ${esc(HB.first_step)}–${esc(HB.last_step)}). ` : "") +
    `Balanced on ${esc(HB.balanced)} of ${esc(HB.judged)} judged views; the rank that waits most loses ` +
    `${esc(HB.wait_share_median === null ? "—" : fmt(HB.wait_share_median * 100, 1) + " %")} of its step (median wait_share). ` +
    `Waits from: ${esc(Object.entries(HB.bases).map(([b, k]) => b + " " + k).join(", "))}.` +
    (HB.culprits.length > 1 ? " Also named: " + HB.culprits.slice(1).map(x =>
      `rank ${esc(x.rank)} (${esc(fmt(x.share * 100, 0))} %${x.phase ? ", " + esc(x.phase) : ""})`).join(", ") + "." : "");
}
const RP = D.rank_phases;
if (RP) {
  $("rankphases-card").style.display = "";
  $("rankphases").innerHTML = "<table><tr><th>rank</th>" + RP.phases.map(p => `<th>${esc(p)}</th>`).join("") +
    "<th>step</th><th>wait</th><th>own work</th></tr>" + RP.rows.map(r => `<tr><td>${esc(r.rank)}</td>` +
    r.phases.map(v => `<td class="n">${esc(fmt(v, 2))}</td>`).join("") +
    [r.step_ms, r.wait_ms, r.work_ms].map(v => `<td class="n">${esc(v === null ? "—" : fmt(v, 2))}</td>`).join("") + "</tr>").join("") + "</table>";
}

const drawn = {}, pending = [], notShown = [];
for (const c of D.charts) {
  if (c.empty) {  // nothing to draw: one line in the "not measured" card below, not a card of its own
    notShown.push(c);
    drawn[c.id] = {empty: c.empty};
    continue;
  }
  const card = document.createElement("div");
  card.className = "card";
  card.innerHTML = `<h2>${esc(c.title)}</h2>`;
  $("charts").appendChild(card);
  const cv = document.createElement("canvas");
  cv.id = "chart-" + c.id;
  card.appendChild(cv);
  const lg = document.createElement("div");
  lg.className = "legend";
  if (c.series) lg.innerHTML = c.series.map(s => `<span><i style="background:${esc(s.color)}"></i>${esc(s.name)}</span>`).join("");
  if (c.kind === "strip") lg.innerHTML = [...new Set(c.labels.map((l, i) => l === null ? "" : JSON.stringify([l, c.shades[i]])))]
    .filter(k => k).map(k => JSON.parse(k)).map(([l, sh]) => `<span><i style="background:${stripColor(c, l, sh)}"></i>${esc(shadeName(l, sh))}</span>`).join("");
  card.appendChild(lg);
  if (c.note) { const p = document.createElement("p"); p.className = "note"; p.textContent = c.note; card.appendChild(p); }
  pending.push([c, cv, lg]);
}
if (notShown.length) {
  const card = document.createElement("div");
  card.className = "card";
  card.id = "not-measured";
  card.innerHTML = "<h2>Not measured in these lines</h2>" +
    notShown.map(c => `<p class="empty"><b>${esc(c.title)}</b>: ${esc(c.empty)}</p>`).join("");
  $("charts").appendChild(card);
}
// Drawn once every card is in place: a canvas takes its size from the laid-out page.
for (const [c, cv, lg] of pending) {
  const X = c.kind === "strip" ? drawStrip(cv, c) : c.kind === "heat" ? drawHeat(cv, c) : drawLine(cv, c);
  tooltip(cv, c, X);
  if (c.legendText) lg.textContent = c.legendText;
  if (c.clippedAt !== undefined) lg.innerHTML += ` <span class="note">(axis cut at ${fmt(c.clippedAt)} ${esc(c.unit)}: ▲ marks points above)</span>`;
  if (c.marks && c.marks.length) lg.innerHTML += ` <span class="note">dashed: ` + [...new Set(c.marks.map(m => m.kind))]
    .map(k => `<b style="color:${own(MARK, k)[0]}">${own(MARK, k)[1]}</b> ${esc(k)}`).join(", ") + ` record (list below the charts)</span>`;
  const r = cv.getBoundingClientRect(), f = c.frame, left = r.left + scrollX, top = r.top + scrollY;
  // plot: the data area on the page, and the x range it maps (report_check finds a step's column).
  drawn[c.id] = {pixels: dataPixels(cv, c.none_color), rect: [left, top, r.width, r.height],
                 plot: [left + f.L, top + f.T, left + f.w - f.R, top + f.h - f.B], x: [c.x[0], c.x[c.x.length - 1]]};
}

const phases = Object.keys(D.top_kernels);
$("top").innerHTML = phases.length ? phases.map(p => `<h3 style="font-size:13px;margin:8px 0 2px">${esc(p)}</h3><table><tr><th>kernel</th><th>ms</th><th>calls</th></tr>` +
  D.top_kernels[p].map(([n, ms, calls]) => `<tr><td>${esc(n)}</td><td class="n">${esc(fmt(ms, 2))}</td><td class="n">${esc(calls)}</td></tr>`).join("") + "</table>").join("")
  : '<p class="empty">no kernels in these lines (no GPU attribution)</p>';
const bases = ["traced", "markers", "carried", "carried_scaled", "host_only", "none"];
$("labels").innerHTML = "<table><tr><th>label</th><th>lines</th><th>share</th><th>basis</th></tr>" + H.labels.map(([l, k, by]) =>
  `<tr><td><i style="display:inline-block;width:10px;height:10px;background:${own((D.charts.find(c => c.kind === "strip") || {colors: {}}).colors, l) || "#999"}"></i> ${esc(l)}</td>` +
  `<td class="n">${esc(k)}</td><td class="n">${esc(fmt(k / H.lines * 100, 1))} %</td><td>${esc(bases.filter(b => by[b]).map(b => b + " " + by[b]).join(", "))}</td></tr>`).join("") + "</table>";
$("slowranks").innerHTML = D.slowest_ranks.length ? "<table><tr><th>rank</th><th>windows slowest</th><th>share</th></tr>" +
  D.slowest_ranks.map(s => `<tr><td>${esc(s.rank)}</td><td class="n">${esc(s.windows)}</td><td class="n">${esc(fmt(s.share * 100, 1))} %</td></tr>`).join("") + "</table>"
  : '<p class="note">one rank: nothing to compare</p>';
$("traces").innerHTML = D.traces.length ? "<table><tr><th>rank</th><th>steps</th><th>why</th><th>file</th></tr>" +
  D.traces.map(t => `<tr><td>${esc(t.rank)}</td><td>${esc(t.steps.join(", ") + (t.more_steps ? " and " + t.more_steps + " more" : ""))}</td>` +
    `<td>${esc(t.reasons.join(", "))}</td><td>` +  // a link only to a checked relative path (steptrace.report.guard)
    (t.href && /^\.\.?\//.test(t.href) ? `<a href="${esc(t.href)}">${esc(t.name)}</a>` : `${esc(t.name)} (${esc(t.why)})`) + "</td></tr>").join("") + "</table>"
  : '<p class="note">no trace in these lines (no step was captured)</p>';
$("marks").innerHTML = D.marks.length ? "<table><tr><th>step</th><th>rank</th><th>record</th><th>what it says</th></tr>" +
  D.marks.map(m => `<tr><td class="n">${esc(m.x)}</td><td class="n">${esc(m.rank)}</td><td>${esc(m.kind)}</td><td>${esc(m.text)}</td></tr>`).join("") + "</table>"
  : '<p class="note">no stall, resumed or end record in these lines</p>';
$("footer").textContent = `steptrace-report: ${D.files.length} file(s), ${H.lines} lines` +
  (H.lines_all !== H.lines ? ` shown of ${H.lines_all} (runs not shown: --run)` : "") +
  (H.unparsable ? `, ${H.unparsable} unparsable line(s) skipped` : "") +
  (H.malformed ? `, ${H.malformed} line(s) skipped: malformed` : "") + `, built in ${fmt(D.build_s, 2)} s.`;

$("self-check").textContent = JSON.stringify({charts: D.charts.length, drawn, errors,
  resources: performance.getEntriesByType("resource").length, height: document.documentElement.scrollHeight});
})();
</script></body></html>
"""
