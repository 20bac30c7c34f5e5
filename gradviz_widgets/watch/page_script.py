"""The watch page's script (plain JS, no build step, inlined by page.py).

Every user string reaches the page through `textContent`, `title` or `value` (never markup);
every number shown was formatted by Python (page_data.norm_table). Norm cells arrive packed and
zlib-compressed; the browser's DecompressionStream inflates them.
"""

SCRIPT = r"""
const D = JSON.parse(document.getElementById("watch-data").textContent || "{}");
const SVGNS = "http://www.w3.org/2000/svg";
const P = D.names.length, MAX_LINES = 6;
const PALETTE = ["#1f77b4", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"];
const ST = D.statuses, SPECIAL = new Set(["none", "zero", "nonfinite"]);
let V = null, selected = D.selected.slice(0, MAX_LINES);
const $ = (id) => document.getElementById(id);
const tip = $("tip");

function el(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in attrs) e.setAttribute(k, String(attrs[k]));
  if (text !== undefined) e.textContent = text;
  return e;
}
function rgb(hex) { return [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)); }
async function inflate(b64) {
  const bin = atob(b64), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const s = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Response(s).arrayBuffer();
}
async function load(view) {
  const buf = await inflate(view.cells), B = view.buckets, n = P * B;
  const vals = view.table.map(Number);
  const logs = vals.map((v) => Math.log10(v));
  let zmin = Infinity, zmax = -Infinity;  // thresholds turned off are null: no line
  for (const t of D.thresholds) if (t !== null) { zmin = Math.min(zmin, Math.floor(Math.log10(t)) - 1); zmax = Math.max(zmax, Math.ceil(Math.log10(t)) + 1); }
  for (const l of logs) { zmin = Math.min(zmin, Math.floor(l)); zmax = Math.max(zmax, Math.ceil(l)); }
  if (!isFinite(zmin)) { zmin = -9; zmax = 2; }
  const bytes = new Uint8Array(buf);
  const u32 = (k) => {  // the k-th uint32 array, stored as 4 byte planes
    const out = new Uint32Array(n), o = 4 * n * k;
    for (let i = 0; i < n; i++) {
      out[i] = (bytes[o + i] | (bytes[o + n + i] << 8) | (bytes[o + 2 * n + i] << 16) | (bytes[o + 3 * n + i] << 24)) >>> 0;
    }
    return out;
  };
  const undelta = (z) => {  // zigzag deltas along each row back to codes
    for (let r = 0; r < P; r++) {
      let c = 0;
      for (let b = 0; b < B; b++) { const i = r * B + b; c += (z[i] >>> 1) ^ -(z[i] & 1); z[i] = c; }
    }
    return z;
  };
  return { ...view, B, vals, logs, zmin, zmax, hi: undelta(u32(0)), lo: undelta(u32(1)),
    hiOff: u32(2), loOff: u32(3), status: new Uint8Array(buf, 16 * n, n) };
}
function stops() {
  const C = D.colors, span = Math.max(V.zmax - V.zmin, 1e-9);
  const at = (l) => Math.min(Math.max((l - V.zmin) / span, 0), 1);
  const [tv, te] = D.thresholds;
  const van = tv === null ? 0 : at(Math.log10(tv)), exp = te === null ? 1 : Math.max(at(Math.log10(te)), van);
  return [[0, C.vanishing[1]], [van, C.vanishing[0]], [van, C.healthy[0]], [exp, C.healthy[1]],
    [exp, C.exploding[0]], [1, C.exploding[1]]];
}
function colorAt(S, t) {
  for (let i = 1; i < S.length; i++) {
    if (t <= S[i][0]) {
      const [t0, c0] = S[i - 1], [t1, c1] = S[i], f = t1 > t0 ? (t - t0) / (t1 - t0) : 1;
      const a = rgb(c0), b = rgb(c1);
      return a.map((x, k) => Math.round(x + (b[k] - x) * f));
    }
  }
  return rgb(S[S.length - 1][1]);
}
function cellValue(i) {
  const s = ST[V.status[i]];
  return s === "vanishing" && V.lo[i] ? V.lo[i] : V.hi[i] || V.lo[i];
}
function drawHeat() {
  const c = $("heat"), B = V.B, S = stops(), span = Math.max(V.zmax - V.zmin, 1e-9);
  // k x k pixels per cell (up to ~4M pixels) so NaN/Inf cells can carry a drawn ✕
  const k = Math.max(1, Math.min(7, Math.floor(Math.sqrt(4e6 / Math.max(B * P, 1)))));
  c.width = Math.max(B, 1) * k; c.height = Math.max(P, 1) * k; c.dataset.scale = String(k);
  const rowH = Math.max(3, Math.min(16, Math.floor(480 / Math.max(P, 1))));
  c.style.height = `${rowH * P}px`;
  const ctx = c.getContext("2d"), img = ctx.createImageData(c.width, c.height);
  const lut = V.logs.map((l) => colorAt(S, (l - V.zmin) / span));  // one colour per norm text
  const plain = ST.map((s) => rgb(D.colors[s][1]));
  for (let r = 0; r < P; r++) for (let b = 0; b < B; b++) {
    const i = r * B + b, code = V.status[i], s = ST[code];
    if (s === undefined) continue;  // no record: transparent
    const v = SPECIAL.has(s) ? 0 : cellValue(i), col = v ? lut[v - 1] : plain[code];
    const mark = s === "nonfinite" && k >= 3;  // a ✕ across the cell, not colour alone
    for (let dy = 0; dy < k; dy++) for (let dx = 0; dx < k; dx++) {
      const o = 4 * ((r * k + dy) * c.width + b * k + dx);
      const ink = mark && (dx === dy || dx === k - 1 - dy) ? [0, 0, 0] : col;
      img.data[o] = ink[0]; img.data[o + 1] = ink[1]; img.data[o + 2] = ink[2]; img.data[o + 3] = 255;
    }
  }
  ctx.putImageData(img, 0, 0);
  const labels = $("heat-labels");
  labels.replaceChildren();
  labels.hidden = rowH < 10;  // too many rows to label: the hover names them
  if (rowH >= 10) for (const name of D.names) {
    const d = document.createElement("div");
    d.textContent = name; d.title = name; d.style.height = d.style.lineHeight = `${rowH}px`;
    labels.append(d);
  }
  V.rowH = rowH;
  drawLegend(S);
  drawAxis();
}
function ticks(lo, hi, n) {
  const raw = (hi - lo) / n, p = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
  const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw) || p * 10;
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi; t += step) out.push(t);
  return out;
}
const end = () => V.first + V.B * V.width;
function drawAxis() {
  const svg = $("heat-axis"), hb = $("heat").getBoundingClientRect();
  const x0 = hb.left - svg.getBoundingClientRect().left, w = hb.width;
  const x = (s) => x0 + ((s - V.first) / (end() - V.first)) * w;
  svg.replaceChildren();
  if (w <= 0) return;
  for (const t of ticks(V.first, end(), 8)) {
    svg.append(el("line", { x1: x(t), x2: x(t), y1: 12, y2: 18, stroke: "#888" }));
    svg.append(el("text", { x: x(t), y: 30, "text-anchor": x(t) > x0 + w - 30 ? "end" : "middle" }, String(t)));
  }
  for (const [step, kind, rows] of D.anomalies) {
    const m = el("path", { d: `M${x(step)} 12 l-5 -10 h10 z`, fill: D.kinds[kind][0] });
    m.append(el("title", {}, `step ${step}: ${D.kinds[kind][1]} in ${rows.length} parameter(s)`));
    svg.append(m);
  }
}
function drawLegend(S) {
  const L = $("legend"); L.replaceChildren();
  const scale = document.createElement("span"); scale.id = "scale";
  scale.style.background = `linear-gradient(to right, ${S.map(([t, c]) => `${c} ${(t * 100).toFixed(1)}%`).join(", ")})`;
  const item = (node, text) => { const s = document.createElement("span"); s.append(node, text); L.append(s); };
  item(scale, ` 10^${V.zmin} … 10^${V.zmax}: vanishing < ${D.threshold_text[0]} ≤ healthy ≤ ${D.threshold_text[1]} < exploding`);
  for (const s of ["none", "zero", "nonfinite"]) {
    const sw = document.createElement("span"); sw.className = "sw"; sw.style.background = D.colors[s][1];
    if (s === "nonfinite") { sw.textContent = D.marks.nonfinite; sw.className = "sw mark"; }
    item(sw, s === "nonfinite" ? `${D.labels[s]} (${D.marks.nonfinite} on the cell)` : D.labels[s]);
  }
  const sw = document.createElement("span"); sw.className = "sw"; sw.style.background = "#fff";
  item(sw, "no record");
}
function cellText(r, b) {
  const i = r * V.B + b, s0 = V.first + b * V.width, s = ST[V.status[i]];
  const steps = V.width > 1 ? `steps ${s0}–${s0 + V.width - 1}` : `step ${s0}`;
  const lines = [D.names[r], `${D.modules[r] || "(top level)"} · ${D.shapes[r]}`, steps];
  lines.push(s === undefined ? "no record" : `status: ${D.labels[s]}`);
  if (V.hi[i]) lines.push(`max ‖g‖ = ${V.table[V.hi[i] - 1]} at step ${s0 + V.hiOff[i]}`);
  if (V.lo[i] && V.width > 1) lines.push(`min ‖g‖ = ${V.table[V.lo[i] - 1]} at step ${s0 + V.loOff[i]}`);
  return lines.join("\n");
}
function showTip(ev, text) {
  tip.textContent = text; tip.hidden = false;
  const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 4);
  tip.style.left = `${Math.max(0, x)}px`; tip.style.top = `${ev.clientY + 14}px`;
}
function heatCell(ev) {
  const c = $("heat"), box = c.getBoundingClientRect();
  const b = Math.floor(((ev.clientX - box.left) / box.width) * V.B), r = Math.floor((ev.clientY - box.top) / V.rowH);
  return b >= 0 && b < V.B && r >= 0 && r < P ? [r, b] : null;
}
function series(r) {
  const pts = [];
  for (let b = 0; b < V.B; b++) {
    const i = r * V.B + b, s0 = V.first + b * V.width;
    if (V.lo[i]) pts.push([s0 + V.loOff[i], V.lo[i] - 1]);
    if (V.hi[i]) pts.push([s0 + V.hiOff[i], V.hi[i] - 1]);
  }
  pts.sort((a, b) => a[0] - b[0]);
  return pts.filter((p, k) => k === 0 || p[0] !== pts[k - 1][0]);
}
"""

SCRIPT += r"""
function drawLines() {
  const svg = $("lines"), W = svg.clientWidth, H = 340, m = { l: 64, r: 12, t: 26, b: 34 };
  svg.replaceChildren();
  const all = selected.map((r) => [r, series(r)]);
  let lo = Infinity, hi = -Infinity;
  for (const [, pts] of all) for (const [, k] of pts) { lo = Math.min(lo, V.logs[k]); hi = Math.max(hi, V.logs[k]); }
  if (!isFinite(lo)) { lo = V.zmin + 1; hi = V.zmax - 1; }
  lo = Math.floor(lo); hi = Math.max(Math.ceil(hi), lo + 1);
  const x = (s) => m.l + ((s - V.first) / Math.max(end() - V.first, 1)) * (W - m.l - m.r);
  const y = (l) => m.t + (1 - (l - lo) / (hi - lo)) * (H - m.t - m.b);
  svg.append(el("rect", { x: m.l, y: m.t, width: Math.max(W - m.l - m.r, 0), height: H - m.t - m.b, fill: "none", stroke: "#ccc" }));
  const every = Math.ceil((hi - lo) / 8);
  for (let e = lo; e <= hi; e += every) {
    svg.append(el("line", { x1: m.l, x2: W - m.r, y1: y(e), y2: y(e), stroke: "#eee" }));
    svg.append(el("text", { x: m.l - 6, y: y(e) + 4, "text-anchor": "end" }, `1e${e}`));
  }
  for (const t of ticks(V.first, end(), 8)) svg.append(el("text", { x: x(t), y: H - m.b + 16, "text-anchor": x(t) > W - m.r - 30 ? "end" : "middle" }, String(t)));
  svg.append(el("text", { x: W - m.r, y: H - 4, "text-anchor": "end" }, "step"));
  D.thresholds.forEach((t, k) => {
    if (t === null) return;
    const l = Math.log10(t), kind = k ? "exploding" : "vanishing";
    if (l < lo || l > hi) return;
    svg.append(el("line", { x1: m.l, x2: W - m.r, y1: y(l), y2: y(l), stroke: D.colors[kind][1], "stroke-dasharray": "6 4", class: "threshold" }));
    svg.append(el("text", { x: W - m.r - 4, y: y(l) - 4, "text-anchor": "end", fill: D.colors[kind][1] }, `${kind} ${D.threshold_text[k]}`));
  });
  const chosen = new Set(selected);
  const shown = D.anomalies.filter((a) => a[2].some((r) => chosen.has(r))).slice(0, 40);
  shown.forEach(([step, kind], n) => {  // labels alternate rows so neighbours do not overlap
    svg.append(el("line", { x1: x(step), x2: x(step), y1: m.t, y2: H - m.b, stroke: D.kinds[kind][0], "stroke-dasharray": "2 3", class: "anomaly" }));
    svg.append(el("text", { x: x(step) + 3, y: m.t + 12 + 12 * (n % 4), fill: D.kinds[kind][0] }, `${D.kinds[kind][1]} @${step}`));
  });
  all.forEach(([r], n) => {  // None / 0.0 / NaN buckets of each line: a band along the bottom
    const yb = H - m.b - 5 - 5 * n;
    for (let b = 0; b < V.B; b++) {
      const s = ST[V.status[r * V.B + b]];
      if (!SPECIAL.has(s)) continue;
      let e = b;
      while (e + 1 < V.B && ST[V.status[r * V.B + e + 1]] === s) e++;
      const x1 = x(V.first + b * V.width), x2 = x(V.first + (e + 1) * V.width);
      const band = el("rect", { x: x1, y: yb, width: Math.max(x2 - x1, 1), height: 4, fill: D.colors[s][1], class: `band ${s}` });
      band.append(el("title", {}, `${D.names[r]}: ${D.labels[s]}, steps ${V.first + b * V.width}–${V.first + (e + 1) * V.width - 1}`));
      svg.append(band); b = e;
    }
  });
  const legend = $("lines-legend"); legend.replaceChildren();
  all.forEach(([r, pts], n) => {
    const c = PALETTE[n % PALETTE.length];
    const d = pts.map(([s, k], j) => `${j ? "L" : "M"}${x(s).toFixed(1)} ${y(V.logs[k]).toFixed(1)}`).join("");
    if (d) svg.append(el("path", { d, fill: "none", stroke: c, "stroke-width": 1.5, class: "line", "data-row": r }));
    if (pts.length === 1) svg.append(el("circle", { cx: x(pts[0][0]), cy: y(V.logs[pts[0][1]]), r: 3, fill: c }));
    const sp = document.createElement("span"), sw = document.createElement("span");
    sw.className = "sw"; sw.style.background = c; sp.append(sw, D.names[r] + (pts.length ? "" : " (no finite norm)"));
    legend.append(sp);
  });
  const dot = el("circle", { r: 4, fill: "none", stroke: "#000", visibility: "hidden" });
  svg.append(dot);
  svg.onmousemove = (ev) => {
    const box = svg.getBoundingClientRect(), mx = ev.clientX - box.left, my = ev.clientY - box.top;
    let best = null;
    for (const [r, pts] of all) for (const [s, k] of pts) {
      const d = Math.hypot(x(s) - mx, y(V.logs[k]) - my);
      if (!best || d < best[0]) best = [d, r, s, k];
    }
    if (!best || best[0] > 40) { tip.hidden = true; dot.setAttribute("visibility", "hidden"); return; }
    const [, r, s, k] = best;
    dot.setAttribute("cx", String(x(s))); dot.setAttribute("cy", String(y(V.logs[k]))); dot.setAttribute("visibility", "visible");
    showTip(ev, `${D.names[r]}\nstep ${s}\n‖g‖ = ${V.table[k]}`);
  };
  svg.onmouseleave = () => { tip.hidden = true; dot.setAttribute("visibility", "hidden"); };
}
function syncPick() {
  const chosen = new Set(selected);
  for (const o of $("pick").options) o.selected = chosen.has(Number(o.value));
}
function setup() {
  $("title").textContent = D.title;
  const pick = $("pick");
  D.names.forEach((n, r) => { const o = document.createElement("option"); o.value = String(r); o.textContent = n; o.title = n; pick.append(o); });
  pick.onchange = () => {
    selected = Array.from(pick.selectedOptions, (o) => Number(o.value)).slice(0, MAX_LINES);
    drawLines();
  };
  const heat = $("heat");
  heat.onmousemove = (ev) => { const rc = heatCell(ev); if (rc) showTip(ev, cellText(...rc)); else tip.hidden = true; };
  heat.onmouseleave = () => { tip.hidden = true; };
  heat.onclick = (ev) => {
    const rc = heatCell(ev); if (!rc) return;
    selected = [rc[0], ...selected.filter((r) => r !== rc[0])].slice(0, MAX_LINES);
    syncPick(); drawLines();
  };
  const body = $("anomalies").tBodies[0];
  for (const [step, kind, rows, detail] of D.anomalies.slice(0, 500)) {
    const tr = body.insertRow();
    const names = rows.slice(0, 20).map((r) => D.names[r]).join(", ") + (rows.length > 20 ? ` and ${rows.length - 20} more` : "");
    for (const t of [String(step), D.kinds[kind][1], names, detail]) tr.insertCell().textContent = t;
  }
  if (D.views.length > 1) {
    $("rank-box").hidden = false;
    D.views.forEach((v, k) => { const o = document.createElement("option"); o.value = String(k); o.textContent = v.label; $("rank").append(o); });
    $("rank").onchange = () => show(Number($("rank").value));
  }
  window.addEventListener("resize", () => { if (V) { drawAxis(); drawLines(); } });
}
async function show(k) {
  V = await load(D.views[k]);
  const v = V;
  $("summary").textContent = `${P} parameters · from step ${v.first}, ${v.B} column(s) of ${v.width} step(s) · ${D.anomalies.length} anomalies`;
  drawHeat(); syncPick(); drawLines();
  document.body.dataset.ready = String(k);
}
setup();
show(0).catch((e) => { $("summary").textContent = `This page could not draw its charts: ${e}`; });
"""
