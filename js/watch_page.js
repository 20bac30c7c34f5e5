// @ts-check
/**
 * The offline watch page (gradviz_widgets/watch/page.py inlines the bundle of this file): the
 * heat map, the lines and the anomaly table, drawn from the page's JSON (#watch-data).
 * Every user string reaches the page through `textContent`, `title` or `value` (never markup);
 * every norm shown was formatted by Python (here only counts and powers of ten: watch_data.js).
 */
import {
  breaks, cellText, elideMiddle, cellValue, colorAt, colorStops, count, decade, lineSlots, loadView, markGroups, plainRuns, rgb, series, skipColumns,
  skipText, summaryText, ticks, withRow, sparseTops,
} from "./watch_data.js";

const SVGNS = "http://www.w3.org/2000/svg";
const MAX_LINES = 6, H = 340, MAX_TABLE = 500;
/** px a group of anomalies spans before the next starts a label ("59 anomalies, steps 4759–5919") */
const LABEL_PX = 190;
const PALETTE = ["#1f77b4", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"];

/** @param {string} id @returns {any} */
const $ = (id) => document.getElementById(id);

/** @param {string} tag @param {Record<string, unknown>} attrs @param {string} [text] */
function el(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const k in attrs) e.setAttribute(k, String(attrs[k]));
  if (text !== undefined) e.textContent = text;
  return e;
}

/** [fill, hatch] of the steps a GradScaler skipped (page.py). @param {any} D @returns {string[]} */
const skipStyle = (D) => D.skipped_style || ["#e4e4e4", "#4d4d4d"];

/** The CSS background of a skipped column: diagonal hatch, over `fill` when given.
 * @param {any} D @param {boolean} fill */
function hatchCss(D, fill) {
  const [f, h] = skipStyle(D);
  return `repeating-linear-gradient(135deg, ${h} 0 1.5px, transparent 1.5px 5px)${fill ? `, ${f}` : ""}`;
}

/** An SVG hatch pattern `id` for the skipped steps, added to `svg`. @param {any} svg @param {any} D @param {string} id */
function hatchPattern(svg, D, id) {
  const [f, h] = skipStyle(D), p = el("pattern", { id, width: 5, height: 5, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" });
  p.append(el("rect", { width: 5, height: 5, fill: f, "fill-opacity": 0.6 }), el("rect", { width: 1.5, height: 5, fill: h, "fill-opacity": 0.7 }));
  const defs = el("defs", {}); defs.append(p); svg.append(defs);
  return `url(#${id})`;
}

/** rows this tall (px) or taller get every label; on shorter ones, the spikes' leading rows */
const LABEL_MIN_ROW = 8;
/** a leading row's label on short rows: its height (px, js/watch_page.css) */
const SPARSE_LABEL_PX = 12;
/** the row labels' column (px, js/watch_page.css): a longer name is elided in the middle */
const LABELS_PX = 200;
/** the parameters' pick list (px, js/watch_page.css #pick): a longer name is elided too */
const PICK_PX = 240;

/** The page: its data `D`, the drawn view `V`, the lines selected and their colours. */
class WatchPage {
  /** @param {any} D */
  constructor(D) {
    this.D = D;
    this.P = D.names.length;
    /** @type {import("./watch_data.js").View} */
    this.V = /** @type {any} */ (null);
    /** @type {number[]} */
    this.selected = D.selected.slice(0, MAX_LINES);
    /** @type {Map<number, number>} row -> index into PALETTE, kept while the line is shown */
    this.slots = new Map();
    this.tip = $("tip");
  }

  end() { return this.V.first + this.V.B * this.V.width; }

  drawHeat() {
    const { D, V, P } = this, c = $("heat"), B = V.B, S = colorStops(D, V), span = Math.max(V.zmax - V.zmin, 1e-9);
    // k x k pixels per cell (up to ~4M pixels) so NaN/Inf cells can carry a drawn ✕
    const k = Math.max(1, Math.min(7, Math.floor(Math.sqrt(4e6 / Math.max(B * P, 1)))));
    c.width = Math.max(B, 1) * k; c.height = Math.max(P, 1) * k; c.dataset.scale = String(k);
    const rowH = Math.max(3, Math.min(16, Math.floor(480 / Math.max(P, 1))));
    c.style.height = `${rowH * P}px`;
    const ctx = c.getContext("2d"), img = ctx.createImageData(c.width, c.height);
    const lut = V.logs.map((l) => colorAt(S, (l - V.zmin) / span));  // one colour per norm text
    const ST = D.statuses, plain = new Set(D.plain), flat = ST.map((/** @type {string} */ s) => rgb(D.colors[s][1]));
    const skip = skipColumns(V), skipFill = rgb(skipStyle(D)[0]);
    for (let r = 0; r < P; r++) for (let b = 0; b < B; b++) {
      const i = r * B + b, code = V.status[i], s = ST[code];
      if (s === undefined) continue;  // no record: transparent
      // NaN/Inf the GradScaler refused (every step of the bucket skipped): not an applied NaN
      const refused = s === "nonfinite" && skip[b] === 2;
      const v = plain.has(s) ? 0 : cellValue(ST, V, i), col = refused ? skipFill : v ? lut[v - 1] : flat[code];
      const mark = s === "nonfinite" && !refused && k >= 3;  // a ✕ across the cell, not colour alone
      for (let dy = 0; dy < k; dy++) for (let dx = 0; dx < k; dx++) {
        const o = 4 * ((r * k + dy) * c.width + b * k + dx);
        const ink = mark && (dx === dy || dx === k - 1 - dy) ? [0, 0, 0] : col;
        img.data[o] = ink[0]; img.data[o + 1] = ink[1]; img.data[o + 2] = ink[2]; img.data[o + 3] = 255;
      }
    }
    ctx.putImageData(img, 0, 0);
    this.drawSkips(skip);
    const lead = this.spikeLeads(ctx, k);
    this.drawLabels(rowH, lead);
    V.rowH = rowH;
    this.drawLegend(S);
    this.drawAxis();
  }

  /** The heat map's row labels: every row's while rows are 8 px or taller (the font follows
   * the row); on shorter rows only the rows leading a spike, each at its row (a GPT-2's 52
   * parameters had no label at all, and the red leading rows went unnamed).
   * @param {number} rowH @param {Map<number, string>} lead */
  drawLabels(rowH, lead) {
    const { D, P } = this, labels = $("heat-labels"), every = rowH >= LABEL_MIN_ROW;
    labels.replaceChildren();
    labels.classList.toggle("sparse", !every);
    labels.style.height = every ? "" : `${rowH * P}px`;
    // 2 px below the row's height: an underscore's stroke sits under the baseline
    const font = every ? Math.min(11, rowH - 2) : 11;
    labels.style.fontSize = every ? `${font}px` : "";
    const fits = Math.max(8, Math.floor((LABELS_PX - 8) / (0.62 * font)));  // characters
    labels.hidden = !every && !lead.size;  // no room and nothing to point at: the hover names rows
    const rows = every ? D.names.map((/** @type {string} */ _, /** @type {number} */ r) => r) : [...lead.keys()].sort((a, b) => a - b);
    const tops = every ? [] : sparseTops(rows, rowH, rowH * P, SPARSE_LABEL_PX);
    rows.forEach((r, i) => {
      const name = D.names[r], d = document.createElement("div");
      d.textContent = elideMiddle(name, fits); d.title = lead.has(r) ? `${name}\n${lead.get(r)}` : name;
      if (every) d.style.height = d.style.lineHeight = `${rowH}px`;
      else d.style.top = `${tops[i]}px`;
      if (lead.has(r)) d.className = "spike-lead";
      labels.append(d);
    });
  }

  /** Hatch the columns of the steps the GradScaler skipped (over the canvas, in CSS pixels:
   * crisp however few pixels a column has). @param {Uint8Array} skip per bucket, skipColumns */
  drawSkips(skip) {
    const { D, V } = this, box = $("heat-skips");
    box.replaceChildren();
    skip.forEach((kind, b) => {
      if (!kind) return;
      const d = document.createElement("div");
      d.className = kind === 2 ? "skip all" : "skip some";
      d.style.left = `${(100 * b) / V.B}%`; d.style.width = `max(${100 / V.B}%, 2px)`;
      d.style.background = hatchCss(D, false);
      box.append(d);
    });
    $("heat").dataset.skipColumns = String(box.childElementCount);
  }

  /** Outline the cells of each spike's first movers (rows) over the spike's buckets.
   * @param {any} ctx @param {number} k @returns {Map<number, string>} row -> sentence */
  spikeLeads(ctx, k) {
    const { D, V } = this, lead = new Map();
    let marks = 0;
    ctx.strokeStyle = D.kinds.spike ? D.kinds.spike[0] : "#d62728"; ctx.lineWidth = Math.max(1, k / 3);
    for (const [step, end, rows, text] of D.spikes || []) {
      const b0 = Math.floor((step - V.first) / V.width), b1 = Math.floor((end - V.first) / V.width);
      if (b1 < 0 || b0 >= V.B) continue;
      for (const r of rows) {
        ctx.strokeRect(Math.max(b0, 0) * k, r * k, (Math.min(b1, V.B - 1) - Math.max(b0, 0) + 1) * k, k);
        if (!lead.has(r)) lead.set(r, text);
        marks++;
      }
    }
    $("heat").dataset.spikeMarks = String(marks);
    return lead;
  }

  drawAxis() {
    const { D, V } = this, svg = $("heat-axis"), hb = $("heat").getBoundingClientRect();
    const x0 = hb.left - svg.getBoundingClientRect().left, w = hb.width;
    const x = (/** @type {number} */ s) => x0 + ((s - V.first) / (this.end() - V.first)) * w;
    svg.replaceChildren();
    if (w <= 0) return;
    for (const t of ticks(V.first, this.end(), 8)) {
      svg.append(el("line", { x1: x(t), x2: x(t), y1: 12, y2: 18, stroke: "#888" }));
      svg.append(el("text", { x: x(t), y: 30, "text-anchor": x(t) > x0 + w - 30 ? "end" : "middle" }, String(t)));
    }
    if (V.skipped.count) {  // a hatched bar under each skipped column, what it means on hover
      const fill = hatchPattern(svg, D, "skip-hatch-axis"), bw = w / V.B;
      for (const [b] of V.skipped.buckets) {
        const s0 = V.first + b * V.width, m = el("rect", { x: x(s0) - (bw < 3 ? 1.5 - bw / 2 : 0), y: 0, width: Math.max(bw, 3), height: 12, fill, stroke: skipStyle(D)[1], "stroke-width": 0.5, class: "skipped" });
        m.append(el("title", {}, `${V.width > 1 ? `steps ${s0}–${s0 + V.width - 1}` : `step ${s0}`}: ${skipText(D, V, b)}`));
        svg.append(m);
      }
    }
    for (const [step, , , text] of D.spikes || []) {  // a bar under the axis, the sentence on hover
      const m = el("rect", { x: x(step) - 3, y: 0, width: 6, height: 12, fill: D.kinds.spike[0], class: "spike" });
      m.append(el("title", {}, `spike, ${text}`));
      svg.append(m);
    }
    for (const [step, kind, rows] of D.anomalies) {
      if (kind === "spike") continue;  // drawn above, with its sentence
      const m = el("path", { d: `M${x(step)} 12 l-5 -10 h10 z`, fill: D.kinds[kind][0] });
      m.append(el("title", {}, `step ${step}: ${D.kinds[kind][1]} in ${count(rows.length, "parameter")}`));
      svg.append(m);
    }
  }

  /** @param {[number, string][]} S */
  drawLegend(S) {
    const { D, V } = this, L = $("legend"); L.replaceChildren();
    const scale = document.createElement("span"); scale.id = "scale";
    scale.style.background = `linear-gradient(to right, ${S.map(([t, c]) => `${c} ${(t * 100).toFixed(1)}%`).join(", ")})`;
    const item = (/** @type {Node} */ node, /** @type {string} */ text) => { const s = document.createElement("span"); s.append(node, text); L.append(s); };
    const L2 = D.labels;  // the statuses' words, from vocabulary.py
    item(scale, ` ${decade(V.zmin)} … ${decade(V.zmax)}: ${L2.vanishing} < ${D.threshold_text[0]} ≤ ${L2.healthy} ≤ ${D.threshold_text[1]} < ${L2.exploding}`);
    for (const s of D.plain) {
      const sw = document.createElement("span"); sw.className = "sw"; sw.style.background = D.colors[s][1];
      if (s === "nonfinite") { sw.textContent = D.marks.nonfinite; sw.className = "sw mark"; }
      item(sw, s === "nonfinite" ? `${D.labels[s]} (${D.marks.nonfinite} on the cell)` : D.labels[s]);
    }
    const sw = document.createElement("span"); sw.className = "sw"; sw.style.background = "#fff";
    item(sw, "no record");
    if (V.skipped.count) {
      const sk = document.createElement("span"); sk.className = "sw skip"; sk.style.background = hatchCss(D, true);
      item(sk, `${D.skipped_label} (hatched column)`);
    }
  }

  /** @param {MouseEvent} ev @param {string} text */
  showTip(ev, text) {
    const tip = this.tip;
    tip.textContent = text; tip.hidden = false;
    const x = Math.min(ev.clientX + 14, window.innerWidth - tip.offsetWidth - 4);
    tip.style.left = `${Math.max(0, x)}px`; tip.style.top = `${ev.clientY + 14}px`;
  }

  /** @param {MouseEvent} ev @returns {[number, number] | null} */
  heatCell(ev) {
    const V = this.V, box = $("heat").getBoundingClientRect();
    const b = Math.floor(((ev.clientX - box.left) / box.width) * V.B), r = Math.floor((ev.clientY - box.top) / (V.rowH ?? 1));
    return b >= 0 && b < V.B && r >= 0 && r < this.P ? [r, b] : null;
  }

  drawLines() {
    const { D, V } = this, svg = $("lines"), W = svg.clientWidth, m = { l: 64, r: 12, t: 26, b: 34 };
    svg.replaceChildren();
    this.slots = lineSlots(this.slots, this.selected, PALETTE.length);
    /** @type {[number, [number, number][]][]} */
    const all = this.selected.map((r) => [r, series(V, r)]);
    let lo = Infinity, hi = -Infinity;
    for (const [, pts] of all) for (const [, k] of pts) { lo = Math.min(lo, V.logs[k]); hi = Math.max(hi, V.logs[k]); }
    if (!isFinite(lo)) { lo = V.zmin + 1; hi = V.zmax - 1; }
    lo = Math.floor(lo); hi = Math.max(Math.ceil(hi), lo + 1);
    const x = (/** @type {number} */ s) => m.l + ((s - V.first) / Math.max(this.end() - V.first, 1)) * (W - m.l - m.r);
    const y = (/** @type {number} */ l) => m.t + (1 - (l - lo) / (hi - lo)) * (H - m.t - m.b);
    this.drawFrame(svg, W, m, lo, hi, x, y);
    this.drawMarks(svg, W, m, lo, hi, x, y, all);
    this.drawPaths(svg, all, x, y);
  }

  /** Axes, grid and the threshold lines. @param {any} svg @param {number} W @param {any} m
   * @param {number} lo @param {number} hi @param {(s: number) => number} x @param {(l: number) => number} y */
  drawFrame(svg, W, m, lo, hi, x, y) {
    const D = this.D;
    svg.append(el("rect", { x: m.l, y: m.t, width: Math.max(W - m.l - m.r, 0), height: H - m.t - m.b, fill: "none", stroke: "#ccc" }));
    const every = Math.ceil((hi - lo) / 8);
    for (let e = lo; e <= hi; e += every) {
      svg.append(el("line", { x1: m.l, x2: W - m.r, y1: y(e), y2: y(e), stroke: "#eee" }));
      svg.append(el("text", { x: m.l - 6, y: y(e) + 4, "text-anchor": "end" }, `1e${e}`));
    }
    const V = this.V;
    if (V.skipped.count) {  // skipped steps: hatched bands behind the lines
      const fill = hatchPattern(svg, D, "skip-hatch-lines");
      for (const [b] of V.skipped.buckets) {
        const s0 = V.first + b * V.width, x1 = x(s0), x2 = x(s0 + V.width);
        const band = el("rect", { x: x1, y: m.t, width: Math.max(x2 - x1, 2), height: H - m.t - m.b, fill, class: "skipped" });
        band.append(el("title", {}, `${V.width > 1 ? `steps ${s0}–${s0 + V.width - 1}` : `step ${s0}`}: ${skipText(D, V, b)}`));
        svg.append(band);
      }
    }
    for (const t of ticks(this.V.first, this.end(), 8)) svg.append(el("text", { x: x(t), y: H - m.b + 16, "text-anchor": x(t) > W - m.r - 30 ? "end" : "middle" }, String(t)));
    svg.append(el("text", { x: W - m.r, y: H - 4, "text-anchor": "end" }, "step"));
    D.thresholds.forEach((/** @type {number|null} */ t, /** @type {number} */ k) => {
      if (t === null) return;
      const l = Math.log10(t), kind = k ? "exploding" : "vanishing";
      if (l < lo || l > hi) return;
      svg.append(el("line", { x1: m.l, x2: W - m.r, y1: y(l), y2: y(l), stroke: D.colors[kind][1], "stroke-dasharray": "6 4", class: "threshold" }));
      svg.append(el("text", { x: W - m.r - 4, y: y(l) - 4, "text-anchor": "end", fill: D.colors[kind][1] }, `${D.labels[kind]} ${D.threshold_text[k]}`));
    });
  }

  /** Anomaly lines and the bands of None / 0.0 / NaN buckets of each line.
   * @param {any} svg @param {number} W @param {any} m @param {number} lo @param {number} hi
   * @param {(s: number) => number} x @param {(l: number) => number} y @param {[number, [number, number][]][]} all */
  drawMarks(svg, W, m, lo, hi, x, y, all) {
    const { D, V } = this, chosen = new Set(this.selected);
    const shown = D.anomalies.filter((/** @type {any[]} */ a) => a[2].some((/** @type {number} */ r) => chosen.has(r)))
      .sort((/** @type {any[]} */ a, /** @type {any[]} */ b) => a[0] - b[0]);
    // lines denser than one per 4 px would hide the norms under them: drawn faint
    const faint = shown.length * 4 > W - m.l - m.r ? { "stroke-opacity": 0.3 } : {};
    for (const [step, kind] of shown) {
      svg.append(el("line", { x1: x(step), x2: x(step), y1: m.t, y2: H - m.b, stroke: D.kinds[kind][0], "stroke-dasharray": "2 3", class: "anomaly", ...faint }));
    }
    // one label per group of nearby ones ("3 anomalies, steps 40–46"; each in its tooltip),
    // the groups' labels alternating rows so neighbours do not overlap
    markGroups(shown, (/** @type {any[]} */ a) => x(a[0]), LABEL_PX).forEach((group, n) => {
      const [step, kind] = group[0], last = group[group.length - 1][0];
      const text = group.length === 1 ? `${D.kinds[kind][1]} @${step}` : `${group.length} anomalies, steps ${step}–${last}`;
      // near the right edge the label ends at it (~6 px a character) instead of running out
      const end = x(step) + 3 + 6 * text.length > W - m.r;
      const label = el("text", { x: end ? W - m.r : x(step) + 3, y: m.t + 12 + 12 * (n % 4), fill: D.kinds[kind][0],
        class: "anomaly-label", ...(end ? { "text-anchor": "end" } : {}) }, text);
      const listed = group.slice(0, 12).map((/** @type {any[]} */ a) => `step ${a[0]}: ${D.kinds[a[1]][1]}`);
      if (group.length > 12) listed.push(`and ${group.length - 12} more (the table lists them)`);
      label.append(el("title", {}, listed.join("\n")));
      svg.append(label);
    });
    all.forEach(([r]) => {  // each line's bands keep their height while the line is shown
      const yb = H - m.b - 5 - 5 * (this.slots.get(r) ?? 0);
      for (const [b, e, s] of plainRuns(D, V, r)) {
        const x1 = x(V.first + b * V.width), x2 = x(V.first + (e + 1) * V.width);
        const band = el("rect", { x: x1, y: yb, width: Math.max(x2 - x1, 1), height: 4, fill: D.colors[s][1], class: `band ${s}` });
        band.append(el("title", {}, `${D.names[r]}: ${D.labels[s]}, steps ${V.first + b * V.width}–${V.first + (e + 1) * V.width - 1}`));
        svg.append(band);
      }
    });
  }

  /** The lines, their legend and the nearest-point hover.
   * @param {any} svg @param {[number, [number, number][]][]} all
   * @param {(s: number) => number} x @param {(l: number) => number} y */
  drawPaths(svg, all, x, y) {
    const { D, V } = this, legend = $("lines-legend"); legend.replaceChildren();
    all.forEach(([r, pts]) => {
      const c = PALETTE[this.slots.get(r) ?? 0];
      const gap = breaks(V, pts);
      const d = pts.map(([s, k], j) => `${gap[j] ? "M" : "L"}${x(s).toFixed(1)} ${y(V.logs[k]).toFixed(1)}`).join("");
      if (d) svg.append(el("path", { d, fill: "none", stroke: c, "stroke-width": 1.5, class: "line", "data-row": r }));
      pts.forEach(([s, k], j) => {  // a point with gaps on both sides: no segment shows it
        if (gap[j] && (j + 1 === pts.length || gap[j + 1])) svg.append(el("circle", { cx: x(s), cy: y(V.logs[k]), r: 3, fill: c }));
      });
      const sp = document.createElement("span"), sw = document.createElement("span");
      sw.className = "sw"; sw.style.background = c; sp.append(sw, D.names[r] + (pts.length ? "" : " (no finite norm)"));
      legend.append(sp);
    });
    const dot = el("circle", { r: 4, fill: "none", stroke: "#000", visibility: "hidden" });
    svg.append(dot);
    svg.onmousemove = (/** @type {MouseEvent} */ ev) => {
      const box = svg.getBoundingClientRect(), mx = ev.clientX - box.left, my = ev.clientY - box.top;
      /** @type {number[] | null} */
      let best = null;
      for (const [r, pts] of all) for (const [s, k] of pts) {
        const d = Math.hypot(x(s) - mx, y(V.logs[k]) - my);
        if (!best || d < best[0]) best = [d, r, s, k];
      }
      if (!best || best[0] > 40) { this.tip.hidden = true; dot.setAttribute("visibility", "hidden"); return; }
      const [, r, s, k] = best;
      dot.setAttribute("cx", String(x(s))); dot.setAttribute("cy", String(y(V.logs[k]))); dot.setAttribute("visibility", "visible");
      this.showTip(ev, `${D.names[r]}\nstep ${s}\n‖g‖ = ${V.table[k]}`);
    };
    svg.onmouseleave = () => { this.tip.hidden = true; dot.setAttribute("visibility", "hidden"); };
  }

  syncPick() {
    const chosen = new Set(this.selected);
    for (const o of $("pick").options) o.selected = chosen.has(Number(o.value));
  }

  setup() {
    const D = this.D;
    $("title").textContent = D.title;
    const pick = $("pick");
    // elided in the middle as the heat map's labels: two long names that differ at their end
    // (`...weight` / `...bias`) read alike when the list cut them at its right edge
    const fits = Math.floor((PICK_PX - 16) / (0.62 * 12));  // characters of the 12 px font
    D.names.forEach((/** @type {string} */ n, /** @type {number} */ r) => { const o = document.createElement("option"); o.value = String(r); o.textContent = elideMiddle(n, fits); o.title = n; pick.append(o); });
    pick.onchange = () => {
      this.selected = Array.from(pick.selectedOptions, (/** @type {HTMLOptionElement} */ o) => Number(o.value)).slice(0, MAX_LINES);
      this.drawLines();
    };
    const heat = $("heat");
    heat.onmousemove = (/** @type {MouseEvent} */ ev) => { const rc = this.heatCell(ev); if (rc) this.showTip(ev, cellText(D, this.V, ...rc)); else this.tip.hidden = true; };
    heat.onmouseleave = () => { this.tip.hidden = true; };
    heat.onclick = (/** @type {MouseEvent} */ ev) => {
      const rc = this.heatCell(ev); if (!rc) return;
      this.selected = withRow(this.selected, rc[0], MAX_LINES);
      this.syncPick(); this.drawLines();
    };
    const body = $("anomalies").tBodies[0];
    $("no-anomalies").hidden = D.anomalies.length > 0;
    $("anomalies").hidden = D.anomalies.length === 0;  // no empty header row
    for (const [step, kind, rows, detail] of D.anomalies.slice(0, MAX_TABLE)) {
      const tr = body.insertRow();
      const names = rows.slice(0, 20).map((/** @type {number} */ r) => D.names[r]).join(", ") + (rows.length > 20 ? ` and ${rows.length - 20} more` : "");
      for (const t of [String(step), D.kinds[kind][1], names, detail]) tr.insertCell().textContent = t;
    }
    if (D.anomalies.length > MAX_TABLE) {  // never a silent cut: the rest are in the record
      const cell = body.insertRow().insertCell();
      cell.colSpan = 4;
      cell.className = "more";
      cell.textContent = `… and ${D.anomalies.length - MAX_TABLE} more anomalies, not listed here: GradWatch.open(path).anomalies lists them all`;
    }
    if (D.views.length > 1) {
      $("rank-box").hidden = false;
      D.views.forEach((/** @type {any} */ v, /** @type {number} */ k) => { const o = document.createElement("option"); o.value = String(k); o.textContent = v.label; $("rank").append(o); });
      $("rank").onchange = () => this.show(Number($("rank").value));
    }
    window.addEventListener("resize", () => { if (this.V) { this.drawAxis(); this.drawLines(); } });
  }

  /** @param {number} k */
  async show(k) {
    const v = await loadView(this.D.views[k], this.P, this.D.thresholds);
    this.V = v;
    $("summary").textContent = summaryText(this.D, v, this.P, this.D.anomalies.length);
    this.drawHeat(); this.syncPick(); this.drawLines();
    document.body.dataset.ready = String(k);
  }
}

function main() {
  const page = new WatchPage(JSON.parse($("watch-data").textContent || "{}"));
  page.setup();
  page.show(0).catch((e) => { $("summary").textContent = `This page could not draw its charts: ${e}`; });
}

if (typeof document !== "undefined" && document.getElementById("watch-data")) main();
