// @ts-check
/**
 * Pan (drag) and zoom (wheel, buttons) for an SVG inside a viewport element.
 * The SVG keeps its own size (1 px per Graphviz point) and viewBox; the view is ONE CSS
 * transform on the <svg> element, written at most once per animation frame (events in
 * between only update `box`), so panning a 1,000-node graph does no per-node work and no
 * re-layout: the compositor moves one layer. `box` is the visible region in SVG units
 * (centred "meet" fit, as a viewBox would be); `data-view-box` on the svg mirrors it.
 * The first view of a graph is the whole graph unless its labels would fall below
 * MIN_LABEL_PX: then it shows the top of the graph at the readable scale, across the part of
 * the top band that holds the most nodes (never an empty corner), placed so that the module
 * (cluster) labels it shows are whole, not cut at its left edge, with a hint; `fitInfo` says
 * whether the whole graph fitted, so the widget can fold deeper instead. When that top shows
 * no node of the worst status the graph has (ranked in Python: vocabulary.alarm_rank),
 * it opens where those nodes are instead; either way it opens on whole nodes, none cut at its
 * left or right edge (`wholeNodesBox`). The whole graph opens at the top of the viewport
 * (`fitBox`), never in the middle of a tall pane.
 */

/** @typedef {{x: number, y: number, w: number, h: number}} Box */
/** @typedef {{x: number, y: number, w: number}} Label  a cluster label: left end, baseline, width */
/** @typedef {{x: number, y: number, w: number, h: number, rank: number}} NodeBox  a node's box
 *  (SVG units) and how bad its status is (`findingRank`; 0: nothing to find) */

const MIN_ZOOM = 0.02;
const MAX_ZOOM = 50;
const DRAG_THRESHOLD_PX = 4;
const MAX_FIT_SCALE = 1.5; // screen px per Graphviz point when fitting a small graph
export const MIN_LABEL_PX = 10; // smallest on-screen label size of the first view
const HINT_READABLE = "Zoomed to readable labels: drag to pan, Ctrl + wheel to zoom, Fit twice shows the whole graph";
const HINT_WHEEL = "Ctrl + wheel zooms the graph (or click it first); the wheel alone scrolls the page";
export const MIN_MEASURE_PX = 48; // a viewport smaller than this (either way) is not laid out
// yet, hidden or detached (a cell scrolled away in a windowed notebook): nothing to fit to
const SETTLE_MS = 180; // after the last move, drop will-change so the layer re-rasters crisp
/** how bad a node's status is for the first view: the worst shown present decides where it opens */
const MAX_PLACED = 300; // nodes: a bigger graph (folded for the screen anyway) keeps its top band
const MIN_SHRINK = 0.75; // of the readable window's width: narrowed (zoomed in) to open on whole
// nodes, the labels grow by a third at most
const MAX_STOPS = 24; // window heights tried per finding search (evenly over the worst nodes)

/**
 * Scale at which the smallest node label reaches `minPx` screen px (labels sampled).
 * @param {SVGSVGElement} svg @param {number} [minPx]
 */
export function readableScale(svg, minPx = MIN_LABEL_PX) {
  let smallest = Infinity;
  const texts = svg.querySelectorAll("g.node text");
  const step = Math.max(1, Math.floor(texts.length / 64));
  for (let i = 0; i < texts.length; i += step) {
    const size = Number.parseFloat(texts[i].getAttribute("font-size") || "");
    if (size > 0 && size < smallest) smallest = size;
  }
  return Number.isFinite(smallest) ? minPx / smallest : 0;
}

/**
 * The viewport's size as "WxH" when it is laid out at a real size, "" when it has none yet
 * (hidden, detached, not laid out): a fit measured then must not choose how deep to fold.
 * @param {{width: number, height: number}} rect @returns {string}
 */
export function measuredSize(rect) {
  const w = Math.round(rect.width);
  const h = Math.round(rect.height);
  return w >= MIN_MEASURE_PX && h >= MIN_MEASURE_PX ? `${w}x${h}` : "";
}

/**
 * Whether a fit report is worth sending: measured at a real size (see `measuredSize`).
 * @param {{width: number, height: number}} fit
 */
export function fitMeasured(fit) {
  return measuredSize(fit) !== "";
}

/**
 * The offset Graphviz gives its drawing: it writes text x/y inside the graph group, which it
 * translates by `translate(tx ty)`.
 * @param {SVGSVGElement} svg @returns {{tx: number, ty: number}}
 */
function graphOffset(svg) {
  const g0 = svg.querySelector(":scope > g");
  const m = /translate\(\s*([-\d.e]+)[\s,]+([-\d.e]+)/.exec(g0?.getAttribute("transform") || "");
  return { tx: m ? Number(m[1]) : 0, ty: m ? Number(m[2]) : 0 };
}

/**
 * Centres of the node labels in SVG user units, each marked when `ghostOf` its node.
 * @param {SVGSVGElement} svg @param {(g: Element) => boolean} [ghostOf]
 * @returns {{x: number, y: number, ghost: boolean}[]}
 */
export function nodeCentres(svg, ghostOf = (/** @type {Element} */ _g) => false) {
  const { tx, ty } = graphOffset(svg);
  const out = [];
  for (const g of Array.from(svg.querySelectorAll("g.node"))) {
    const t = g.querySelector("text");
    const x = Number.parseFloat(t?.getAttribute("x") ?? "");
    const y = Number.parseFloat(t?.getAttribute("y") ?? "");
    if (Number.isFinite(x) && Number.isFinite(y)) out.push({ x: x + tx, y: y + ty, ghost: ghostOf(g) });
  }
  return out;
}

/**
 * The cluster (module) labels in SVG user units: left end, baseline and width of each (the
 * drawn width where the browser measures it, else estimated from the font size).
 * @param {SVGSVGElement} svg @returns {Label[]}
 */
export function clusterLabels(svg) {
  const { tx, ty } = graphOffset(svg);
  const out = [];
  for (const t of Array.from(svg.querySelectorAll("g.cluster > text"))) {
    const x = Number.parseFloat(t.getAttribute("x") ?? "");
    const y = Number.parseFloat(t.getAttribute("y") ?? "");
    if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
    const size = Number.parseFloat(t.getAttribute("font-size") || "") || 10;
    let w = 0;
    try { w = /** @type {SVGTextElement} */ (t).getBBox().width; } catch { /* no layout */ }
    if (!(w > 0)) w = (t.textContent ?? "").length * size * 0.6;
    const anchor = t.getAttribute("text-anchor");
    const left = anchor === "middle" ? x - w / 2 : anchor === "end" ? x - w : x;
    out.push({ x: left + tx, y: y + ty, w });
  }
  return out;
}

/**
 * How well a window [x, x + w] of the top band reads: the node labels it holds, plus the
 * cluster labels it shows whole, less a heavy price for each cluster label it cuts at its left
 * edge (a module name missing its start) and a small one for each cut at its right.
 * @param {number} x @param {number} w @param {number[]} xs node centres (x)
 * @param {Label[]} labels cluster labels of the band
 */
function windowScore(x, w, xs, labels) {
  let score = 0;
  for (const c of xs) if (c >= x && c <= x + w) score++;
  for (const l of labels) {
    if (l.x >= x && l.x + l.w <= x + w) score++;
    else if (l.x < x && l.x + l.w > x) score -= 3;
    else if (l.x < x + w && l.x + l.w > x + w) score--;
  }
  return score;
}

/**
 * The readable first view of a graph too big for the viewport: a `w` x `h` box (SVG units) at
 * the top of the graph, placed across the nodes of the top band so that it holds as many of
 * them as possible (the graph's left edge can be an empty cluster margin), moved where that
 * keeps the module (cluster) labels it shows whole rather than cut at its left edge. Given the
 * nodes' boxes, it then opens on whole nodes, and on the worst findings when the top shows
 * none of them (`wholeNodesBox`).
 * @param {Box} base the graph's box @param {number} pad @param {number} w @param {number} h
 * @param {{x: number, y: number, ghost?: boolean}[]} centres node label centres (ghost: a parameter backward never reached)
 * @param {Label[]} [labels] cluster labels (`clusterLabels`)
 * @param {NodeBox[]} [nodes] node boxes (`nodeBoxes`)
 * @returns {Box}
 */
export function readableBox(base, pad, w, h, centres, labels = [], nodes = []) {
  // the whole graph's margin grows with its size: on a graph 50,000 units wide it is taller
  // than the readable window itself, which then showed nothing but margin
  pad = Math.min(pad, w * 0.05, h * 0.05);
  const box = topBandBox(base, pad, w, h, centres, labels);
  const area = { x: base.x - pad, y: base.y - pad, w: base.w + 2 * pad, h: base.h + 2 * pad };
  return wholeNodesBox(box, area, nodes, labels);
}

/**
 * `readableBox` from the node centres and module labels alone (`pad` already bounded).
 * @param {Box} base @param {number} pad @param {number} w @param {number} h
 * @param {{x: number, y: number, ghost?: boolean}[]} centres @param {Label[]} labels @returns {Box}
 */
function topBandBox(base, pad, w, h, centres, labels) {
  const y = base.y - pad;
  if (base.w + 2 * pad <= w) return { x: base.x + base.w / 2 - w / 2, y, w, h };
  const all = centres.filter((c) => c.y <= y + h * 0.85);
  // the gradient's own nodes decide where the band is busiest, not a row of parameters that
  // got none (lesson 02's five ghost modules took the window off its one live path)
  const live = all.filter((c) => !c.ghost);
  const band = live.length ? live : all;
  const xs = (band.length ? band : centres).map((c) => c.x).sort((a, b) => a - b);
  const [lo, hi] = topRowRange(base, pad, w, h, centres);
  const clamp = (/** @type {number} */ v) => Math.min(Math.max(v, lo), hi);
  const x = clamp(busiestWindow(xs, w) ?? lo);
  const shown = labels.filter((l) => l.y >= y && l.y <= y + h);
  if (!shown.length) return { x, y, w, h };
  const margin = Math.min(8, w * 0.02);
  const candidates = [x, ...shown.flatMap((l) => [l.x - margin, l.x + l.w + margin]).map(clamp)];
  let best = x;
  let top = windowScore(x, w, xs, shown);
  for (const c of candidates) {
    const score = windowScore(c, w, xs, shown);
    if (score > top) { top = score; best = c; }
  }
  return { x: best, y, w, h };
}

/**
 * How bad a node's status is for the first view (0: nothing to find): its node info's `alarm`,
 * which Python ranks (vocabulary.alarm_rank: the page knows no status).
 * @param {{alarm?: unknown} | undefined} [info] @returns {number}
 */
export function findingRank(info) {
  const alarm = info?.alarm;
  return typeof alarm === "number" && Number.isFinite(alarm) ? alarm : 0;
}

/**
 * The nodes' boxes in SVG user units (their outlines, not their texts: a label wider than its
 * frame is fitted to it later), each with its `rankOf`; none for a graph of more than
 * MAX_PLACED nodes, or one not laid out: the first view then keeps its top band.
 * @param {SVGSVGElement} svg @param {(g: Element) => number} rankOf @returns {NodeBox[]}
 */
export function nodeBoxes(svg, rankOf) {
  const els = Array.from(svg.querySelectorAll("g.node"));
  if (els.length > MAX_PLACED) return [];
  const { tx, ty } = graphOffset(svg);
  const out = [];
  for (const g of els) {
    const b = outlineOf(g);
    if (b) out.push({ x: b.x + tx, y: b.y + ty, w: b.w, h: b.h, rank: rankOf(g) });
  }
  return out;
}

/** @param {Element} g a node @returns {Box | null} the union of its outline shapes' boxes */
function outlineOf(g) {
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const el of Array.from(g.querySelectorAll(":scope > polygon, :scope > ellipse, :scope > path, :scope > polyline"))) {
    let b = null;
    try { b = /** @type {SVGGraphicsElement} */ (el).getBBox(); } catch { /* no layout */ }
    if (!b || !(b.width > 0 && b.height > 0)) continue;
    x0 = Math.min(x0, b.x); y0 = Math.min(y0, b.y);
    x1 = Math.max(x1, b.x + b.width); y1 = Math.max(y1, b.y + b.height);
  }
  return x1 > x0 ? { x: x0, y: y0, w: x1 - x0, h: y1 - y0 } : null;
}

/**
 * The readable window `box` moved onto whole nodes: none cut at its left or right edge (as few
 * as can be where every place cuts some; narrowed, that is zoomed in, down to MIN_SHRINK of
 * its width where that keeps both sides clear), no module label cut at its left, as near
 * `box` as that allows. When `box` does not show every node of the graph's worst status
 * (`NodeBox.rank`) whole (a NaN layer beside a top row of frozen weights), it goes where it
 * shows the most of them, then the most findings, then the most nodes.
 * @param {Box} box @param {Box} area the padded graph: the window stays inside it
 * @param {NodeBox[]} nodes @param {Label[]} [labels] @returns {Box}
 */
export function wholeNodesBox(box, area, nodes, labels = []) {
  if (!nodes.length || nodes.length > MAX_PLACED) return box;
  const worst = nodes.reduce((m, n) => Math.max(m, n.rank), 0);
  const search = worst > 0 && nodes.some((n) => n.rank === worst && !holds(box, n));
  const margin = Math.min(8, box.w * 0.02);
  const worstNodes = search ? spread(nodes.filter((n) => n.rank === worst), MAX_STOPS) : [];
  const ys = search ? stops(worstNodes.map((n) => [n.y, n.h]), box.y, box.h, area.y, area.h, margin) : [box.y];
  let best = box;
  /** @type {number[] | null} */
  let top = null;
  for (const y of ys) {
    const rows = nodes.filter((n) => n.y < y + box.h && n.y + n.h > y);
    for (const b of windowsAt({ ...box, y }, area, rows, margin)) {
      const key = placeKey(b, box, rows, labels, worst, search);
      if (!top || ahead(key, top)) { top = key; best = b; }
    }
  }
  return best;
}

/**
 * Windows like `box` (at its height) to choose from: `box` itself; each whole width starting
 * at the area's left edge or just right of a run of nodes (`rows`, widened by `margin`), or
 * ending at the area's right edge or just left of one; and each of those narrowed to end
 * (start) between nodes, when it keeps MIN_SHRINK of the width (shorter in the same ratio).
 * @param {Box} box @param {Box} area @param {NodeBox[]} rows @param {number} margin
 * @returns {Box[]}
 */
function windowsAt(box, area, rows, margin) {
  const lo = area.x;
  const hi = area.x + area.w;
  if (hi - lo <= box.w) return [box];
  const runs = merged(rows.map((n) => [n.x - margin, n.x + n.w + margin]));
  const runAt = (/** @type {number} */ v) => runs.find(([a, b]) => v > a && v < b);
  const out = [box];
  const add = (/** @type {number} */ l, /** @type {number} */ r) => {
    const w = r - l;
    if (l >= lo && r <= hi && w >= MIN_SHRINK * box.w && w <= box.w + 1e-9) {
      out.push({ x: l, y: box.y, w, h: (box.h * w) / box.w });
    }
  };
  for (const l of [lo, ...runs.map(([, b]) => b)]) {
    const r = Math.min(l + box.w, hi);
    add(r - box.w, r);
    add(l, runAt(r)?.[0] ?? r);
  }
  for (const r of [hi, ...runs.map(([a]) => a)]) {
    const l = Math.max(r - box.w, lo);
    add(l, l + box.w);
    add(runAt(l)?.[1] ?? l, r);
  }
  return out;
}

/** @param {number[][]} spans [start, end] pairs @returns {number[][]} their union, in order */
function merged(spans) {
  const out = [];
  for (const [a, b] of [...spans].sort((p, q) => p[0] - q[0])) {
    const last = out[out.length - 1];
    if (last && a <= last[1]) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}

/** @param {Box} b @param {Box} n @returns {boolean} whether `n` lies whole inside `b` */
function holds(b, n) {
  return n.x >= b.x && n.x + n.w <= b.x + b.w && n.y >= b.y && n.y + n.h <= b.y + b.h;
}

/**
 * Where a window `size` long may start along one axis so that an item ([start, length]) sits
 * whole just inside its near or far edge; also `at`, and both ends of [lo, lo + span - size].
 * @param {number[][]} items @param {number} at @param {number} size @param {number} lo
 * @param {number} span @param {number} margin @returns {number[]}
 */
function stops(items, at, size, lo, span, margin) {
  const hi = lo + span - size;
  if (hi <= lo) return [at];
  const clamp = (/** @type {number} */ v) => Math.min(Math.max(v, lo), hi);
  const out = [at, lo, hi];
  for (const [start, len] of items) out.push(clamp(start - margin), clamp(start + len + margin - size));
  return [...new Set(out.map((v) => Math.round(v * 100) / 100))];
}

/** @template T @param {T[]} list @param {number} most @returns {T[]} at most `most`, evenly */
function spread(list, most) {
  if (list.length <= most) return list;
  return Array.from({ length: most }, (_, i) => list[Math.floor((i * list.length) / most)]);
}

/**
 * How good window `b` is, compared key by key (`ahead`): showing a node of the `worst` status
 * whole first; then fewer nodes cut at its left or right edge; more nodes of the worst status
 * whole, more findings whole (worse ones count more) and fewer module labels cut at its left; when looking for the worst (`search`),
 * then more nodes whole and fewer cut at its top or bottom; last, nearer the window `from` it
 * started as, and as wide.
 * @param {Box} b @param {Box} from @param {NodeBox[]} rows the nodes across b's height
 * @param {Label[]} labels @param {number} worst @param {boolean} search @returns {number[]}
 */
function placeKey(b, from, rows, labels, worst, search) {
  let cuts = 0, worstIn = 0, found = 0, whole = 0, across = 0;
  for (const n of rows) {
    const right = n.x + n.w;
    if ((n.x < b.x && right > b.x) || (n.x < b.x + b.w && right > b.x + b.w)) cuts++;
    else if (n.x < b.x || right > b.x + b.w) continue;
    else if (!holds(b, n)) across++;
    else {
      whole++;
      if (n.rank) found += 2 ** n.rank;
      if (worst && n.rank === worst) worstIn++;
    }
  }
  const cutLabels = labels.filter((l) => l.y >= b.y && l.y <= b.y + b.h && l.x < b.x && l.x + l.w > b.x).length;
  const near = -(Math.abs(b.x - from.x) / from.w + Math.abs(b.y - from.y) / from.h + 1 - b.w / from.w);
  // a window with none of the worst nodes is no view of them, however cleanly it is cut; nor
  // is one with no whole node at all a view (an offline page opened on the empty stretch
  // beside a 190-character module's frame: nothing there to cut)
  const head = [worstIn > 0 || !worst ? 1 : 0, whole > 0 ? 1 : 0, -cuts, worstIn, found, -cutLabels];
  return search ? [...head, whole, -across, near] : [...head, near];
}

/** @param {number[]} a @param {number[]} b @returns {boolean} whether key `a` beats `b` */
function ahead(a, b) {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] > b[i];
  return false;
}

/**
 * The range of left edges a readable window may take: within the graph's margin, and holding
 * the graph's top row (the nodes within a tenth of the window's height of the topmost) when
 * that row fits in it. The busiest part of a diagonal graph is its middle: a window there cut
 * off the first module at the top, and with it a frozen weight, the run's only finding.
 * @param {Box} base @param {number} pad @param {number} w @param {number} h
 * @param {{x: number, y: number}[]} centres
 * @returns {[number, number]}
 */
function topRowRange(base, pad, w, h, centres) {
  const lo = base.x - pad;
  const hi = base.x + base.w + pad - w;
  if (!centres.length) return [lo, hi];
  // reduce, not Math.min(...xs): a graph of 100k+ nodes overflows the argument list
  const top = centres.reduce((m, c) => Math.min(m, c.y), Infinity);
  const row = centres.filter((c) => c.y <= top + h * 0.1).map((c) => c.x);
  const margin = w * 0.08;
  const from = row.reduce((m, x) => Math.min(m, x), Infinity) - margin;
  const to = row.reduce((m, x) => Math.max(m, x), -Infinity) + margin;
  if (to - from > w) return [lo, hi];
  const first = Math.min(Math.max(to - w, lo), hi);
  return [first, Math.min(Math.max(from, first), hi)];
}

/**
 * Left edge of the window of width `w` whose middle 85 % covers the most of the sorted `xs`,
 * centred on them (null when there are none).
 * @param {number[]} xs @param {number} w @returns {number | null}
 */
function busiestWindow(xs, w) {
  if (!xs.length) return null;
  const span = w * 0.85;
  let best = 0;
  let bi = 0;
  let bj = 0;
  for (let i = 0, j = 0; i < xs.length; i++) {
    while (j + 1 < xs.length && xs[j + 1] - xs[i] <= span) j++;
    if (j - i + 1 > best) { best = j - i + 1; bi = i; bj = j; }
  }
  return (xs[bi] + xs[bj]) / 2 - w / 2;
}

/**
 * The whole graph in a `width` x `height` px viewport: the scale (screen px per unit, at most
 * MAX_FIT_SCALE; 0 when the viewport has no size) and the box (SVG units, the viewport's
 * shape) that shows it, centred across and at the TOP of the viewport. A graph lower than the
 * viewport (a 2-node chain folded to one wide group, or any small graph) sat in the middle of
 * a tall pane: with the pane's top at the middle of the window, the graph was below the
 * window's edge and the visible part of the pane blank. Placed at the top it shows as soon as
 * the pane's top does; a graph as tall as the viewport fills it either way.
 * @param {Box} base the graph's box @param {number} pad margin around it (SVG units)
 * @param {number} width @param {number} height the viewport (px)
 * @returns {{box: Box, scale: number}}
 */
export function fitBox(base, pad, width, height) {
  const w = base.w + 2 * pad;
  const h = base.h + 2 * pad;
  const cx = base.x + base.w / 2;
  if (!(width > 0 && height > 0)) return { box: { x: cx - w / 2, y: base.y - pad, w, h }, scale: 0 };
  const s = Math.min(width / w, height / h, MAX_FIT_SCALE);
  const bw = width / s;
  return { box: { x: cx - bw / 2, y: base.y - pad, w: bw, h: height / s }, scale: s };
}

export class PanZoom {
  /** @param {HTMLElement} viewport */
  constructor(viewport) {
    this.viewport = viewport;
    /** @type {SVGSVGElement | null} */
    this.svg = null;
    /** @type {Box} */
    this.base = { x: 0, y: 0, w: 1, h: 1 };
    /** @type {Box} */
    this.box = { ...this.base };
    /** Set after a drag so the click that ends it is ignored. */
    this.justDragged = false;
    /** @type {{x: number, y: number, box: Box, id: number, dragging: boolean} | null} */
    this.drag = null;
    this.frame = 0;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this.settle = undefined;
    /** Whether the first view was held at the readable scale (not the whole graph). */
    this.clamped = false;
    /** How bad a node's status is (`findingRank`): the first view opens on the worst. */
    this.rankOf = (/** @type {Element} */ _g) => 0;
    /** whether a node is a ghost (a parameter backward never reached): set by the graph view */
    this.ghostOf = (/** @type {Element} */ _g) => false;
    /** Whether the user zoomed or panned since the last fit (a resize then keeps the view). */
    this.userMoved = false;
    /** The last fit: did the whole graph fit at a readable scale, in which viewport size, and
     *  how wide (px) the whole graph is at that scale (`across`: the widget may give the graph
     *  the whole cell, the chart under it, when that is what it lacks). */
    this.fitInfo = { fits: true, width: 0, height: 0, scale: 0, readable: 0, across: 0 };
    this.hint = document.createElement("div");
    this.hint.className = "gvw-hint";
    this.hint.hidden = true;
    this.hint.textContent = HINT_READABLE;
    /** Whether the wheel zooms without Ctrl: after a press inside the graph, until the pointer
     *  leaves it (a notebook scrolled by, the wheel went on scrolling the page). */
    this.engaged = false;
    this.hintTimer = 0;
    // under the viewport, never over the graph
    if (viewport.parentElement) viewport.after(this.hint);
    else viewport.appendChild(this.hint);
    this.onWheel = this.onWheel.bind(this);
    this.onPointerDown = this.onPointerDown.bind(this);
    this.onPointerMove = this.onPointerMove.bind(this);
    this.onPointerUp = this.onPointerUp.bind(this);
    this.onClickCapture = this.onClickCapture.bind(this);
    viewport.addEventListener("wheel", this.onWheel, { passive: false });
    this.onLeave = () => { this.engaged = false; };
    viewport.addEventListener("pointerleave", this.onLeave);
    viewport.addEventListener("pointerdown", this.onPointerDown);
    viewport.addEventListener("pointermove", this.onPointerMove);
    viewport.addEventListener("pointerup", this.onPointerUp);
    viewport.addEventListener("pointercancel", this.onPointerUp);
    viewport.addEventListener("click", this.onClickCapture, true);
  }

  /**
   * Take control of a freshly inserted SVG.
   * @param {SVGSVGElement} svg
   * @param {boolean} keepView keep the current viewBox (same graph, new styling)
   */
  attach(svg, keepView) {
    const vb = svg.viewBox.baseVal;
    const base = vb && vb.width > 0 ? { x: vb.x, y: vb.y, w: vb.width, h: vb.height }
      : { x: 0, y: 0, w: Number.parseFloat(svg.getAttribute("width") || "100"), h: Number.parseFloat(svg.getAttribute("height") || "100") };
    svg.setAttribute("viewBox", `${base.x} ${base.y} ${base.w} ${base.h}`);
    svg.setAttribute("width", String(base.w));
    svg.setAttribute("height", String(base.h));
    svg.classList.add("gvw-graph");
    this.svg = svg;
    this.base = base;
    if (keepView) this.flush(true);
    else this.fit(true);
  }

  /**
   * Show the whole graph at the top of the viewport (`fitBox`; small graphs are not blown up
   * beyond MAX_FIT_SCALE). With
   * `readable`, never below the scale where labels reach MIN_LABEL_PX: a larger graph then
   * shows the busiest part of its top band (`readableBox`), and the hint says how to see the rest.
   * @param {boolean} [readable]
   */
  fit(readable = false) {
    const pad = Math.max(this.base.w, this.base.h) * 0.02;
    const r = this.viewport.getBoundingClientRect();
    const { box, scale: s } = fitBox(this.base, pad, r.width, r.height);
    const min = this.svg ? readableScale(this.svg) : 0;
    this.fitInfo = { fits: !(s > 0 && s < min), width: Math.round(r.width), height: Math.round(r.height),
      scale: s, readable: min, across: this.readableSize().w };
    this.clamped = readable && s > 0 && s < min;
    this.box = this.clamped && this.svg
      ? readableBox(this.base, pad, r.width / min, r.height / min, nodeCentres(this.svg, this.ghostOf),
        clusterLabels(this.svg), nodeBoxes(this.svg, this.rankOf))
      : box;
    this.userMoved = false;
    this.hint.hidden = !this.clamped;
    this.flush(true);
  }

  /** Screen size (px) of the whole graph at the readable scale, padded as `fit` pads it. */
  readableSize() {
    const pad = Math.max(this.base.w, this.base.h) * 0.02;
    const min = this.svg ? readableScale(this.svg) : 0;
    return { w: (this.base.w + 2 * pad) * min, h: (this.base.h + 2 * pad) * min };
  }

  /** Ask for the transform to be written in the next animation frame (coalesced). */
  apply() {
    if (!this.svg || this.frame) return;
    if (typeof requestAnimationFrame !== "function") { this.flush(true); return; }
    this.frame = requestAnimationFrame(() => { this.frame = 0; this.flush(true); });
    this.viewport.classList.add("gvw-moving");
    clearTimeout(this.settle);
    this.settle = setTimeout(() => this.viewport.classList.remove("gvw-moving"), SETTLE_MS);
  }

  /**
   * Write the pending transform now (before reading element positions).
   * @param {boolean} [force] write even when no frame is pending
   */
  flush(force = false) {
    if (this.frame) { cancelAnimationFrame(this.frame); this.frame = 0; force = true; }
    if (!force || !this.svg) return;
    const r = this.viewport.getBoundingClientRect();
    const s = this.scale(r);
    const { x, y, w, h } = this.box;
    const tx = (r.width - w * s) / 2 - (x - this.base.x) * s;
    const ty = (r.height - h * s) / 2 - (y - this.base.y) * s;
    this.svg.style.transform = `translate(${tx}px, ${ty}px) scale(${s})`;
    this.svg.setAttribute("data-view-box", `${x} ${y} ${w} ${h}`);
  }

  /** Screen pixels per SVG unit for the current box. @param {DOMRect} [rect] */
  scale(rect) {
    const r = rect ?? this.viewport.getBoundingClientRect();
    return Math.min(r.width / this.box.w, r.height / this.box.h) || 1;
  }

  /**
   * Convert client (screen) coordinates to SVG user coordinates.
   * @param {number} cx @param {number} cy
   */
  toUser(cx, cy) {
    const r = this.viewport.getBoundingClientRect();
    const s = this.scale();
    const ox = (r.width - this.box.w * s) / 2;
    const oy = (r.height - this.box.h * s) / 2;
    return { x: this.box.x + (cx - r.left - ox) / s, y: this.box.y + (cy - r.top - oy) / s };
  }

  /**
   * Zoom by `factor` keeping the point under (cx, cy) fixed (default: centre).
   * @param {number} factor @param {number} [cx] @param {number} [cy]
   */
  zoomBy(factor, cx, cy) {
    const r = this.viewport.getBoundingClientRect();
    const px = cx ?? r.left + r.width / 2;
    const py = cy ?? r.top + r.height / 2;
    const zoom = this.base.w / this.box.w;
    const target = Math.min(MAX_ZOOM, Math.max(MIN_ZOOM, zoom * factor));
    const f = target / zoom;
    const before = this.toUser(px, py);
    this.box = { ...this.box, w: this.box.w / f, h: this.box.h / f };
    const after = this.toUser(px, py);
    this.box.x += before.x - after.x;
    this.box.y += before.y - after.y;
    this.userMoved = true;
    this.apply();
  }

  /**
   * Centre an element; zoom in so that it is at least `minScale` px per unit.
   * @param {Element} el @param {number} [minScale]
   */
  centerOn(el, minScale = 1) {
    this.flush();
    const er = el.getBoundingClientRect();
    const c = this.toUser(er.left + er.width / 2, er.top + er.height / 2);
    const s = this.scale();
    if (s < minScale) {
      const f = minScale / s;
      this.box.w /= f;
      this.box.h /= f;
    }
    this.box.x = c.x - this.box.w / 2;
    this.box.y = c.y - this.box.h / 2;
    this.apply();
  }

  /** @param {Element} el @returns {boolean} whether el lies fully inside the viewport */
  isVisible(el) {
    this.flush();
    const r = this.viewport.getBoundingClientRect();
    const e = el.getBoundingClientRect();
    return e.left >= r.left && e.right <= r.right && e.top >= r.top && e.bottom <= r.bottom;
  }

  /** @param {WheelEvent} ev */
  onWheel(ev) {
    if (!this.svg) return;
    // the page's own scroll unless asked for: Ctrl / Cmd (a trackpad pinch sets ctrlKey), or
    // a press inside the graph first (scrolling a notebook past it zoomed it to a thumbnail)
    if (!(ev.ctrlKey || ev.metaKey || this.engaged)) {
      this.sayWheel();
      return;
    }
    ev.preventDefault();
    const unit = ev.deltaMode === 1 ? 16 : ev.deltaMode === 2 ? 400 : 1;
    this.zoomBy(Math.exp(-ev.deltaY * unit * 0.0015), ev.clientX, ev.clientY);
  }

  /** A moment's hint under the graph: how the wheel zooms here. */
  sayWheel() {
    this.hint.textContent = HINT_WHEEL;
    this.hint.hidden = false;
    clearTimeout(this.hintTimer);
    this.hintTimer = Number(setTimeout(() => {
      this.hint.textContent = HINT_READABLE;
      this.hint.hidden = !this.clamped;
    }, 2500));
  }

  /** @param {PointerEvent} ev */
  onPointerDown(ev) {
    this.engaged = true;
    if (!this.svg || ev.button !== 0) return;
    const r = this.viewport.getBoundingClientRect();
    if (ev.clientX > r.right - 18 && ev.clientY > r.bottom - 18) return; // the resize grip
    this.justDragged = false;
    this.drag = { x: ev.clientX, y: ev.clientY, box: { ...this.box }, id: ev.pointerId, dragging: false };
  }

  /** @param {PointerEvent} ev */
  onPointerMove(ev) {
    const d = this.drag;
    if (!d || ev.pointerId !== d.id) return;
    const dx = ev.clientX - d.x;
    const dy = ev.clientY - d.y;
    if (!d.dragging) {
      if (Math.hypot(dx, dy) < DRAG_THRESHOLD_PX) return;
      d.dragging = true;
      this.viewport.classList.add("gvw-dragging");
      this.viewport.setPointerCapture?.(ev.pointerId);
    }
    const s = this.scale();
    this.userMoved = true;
    this.box = { ...d.box, x: d.box.x - dx / s, y: d.box.y - dy / s };
    this.apply();
  }

  /** @param {PointerEvent} ev */
  onPointerUp(ev) {
    const d = this.drag;
    if (!d || ev.pointerId !== d.id) return;
    this.justDragged = d.dragging;
    this.drag = null;
    this.viewport.classList.remove("gvw-dragging");
    if (this.viewport.hasPointerCapture?.(ev.pointerId)) this.viewport.releasePointerCapture(ev.pointerId);
  }

  /** Swallow the click that ends a drag. @param {MouseEvent} ev */
  onClickCapture(ev) {
    if (this.justDragged) {
      this.justDragged = false;
      ev.stopPropagation();
      ev.preventDefault();
    }
  }

  detach() {
    const v = this.viewport;
    this.hint.remove();
    v.removeEventListener("wheel", this.onWheel);
    v.removeEventListener("pointerleave", this.onLeave);
    clearTimeout(this.hintTimer);
    v.removeEventListener("pointerdown", this.onPointerDown);
    v.removeEventListener("pointermove", this.onPointerMove);
    v.removeEventListener("pointerup", this.onPointerUp);
    v.removeEventListener("pointercancel", this.onPointerUp);
    v.removeEventListener("click", this.onClickCapture, true);
    if (this.frame) cancelAnimationFrame(this.frame);
    clearTimeout(this.settle);
    this.frame = 0;
    this.svg = null;
  }
}
