// @ts-check
/**
 * The numbers of the offline watch page (gradviz_widgets/watch/page.py), without the DOM:
 * unpacking the cells Python packed (watch/page_data.py), the colour scale, and the text of a
 * cell. Every number shown was formatted by Python (page_data.norm_table); statuses, their
 * colours and labels come from the page's data (vocabulary.py), never from a copy here.
 */

/**
 * @typedef {{statuses: string[], plain: string[], names: string[], modules: string[],
 *   shapes: string[], thresholds: (number|null)[], threshold_text: string[],
 *   colors: Record<string, string[]>, labels: Record<string, string>,
 *   skipped_label?: string, skipped_text?: string, skipped_style?: string[],
 *   none_why?: number[][][], none_words?: string[]}} PageData
 * @typedef {{count: number, first: number[], buckets: number[][]}} Skipped the steps a
 *   GradScaler skipped: how many, the first few, [bucket, how many, first step] per bucket
 * @typedef {{label: string, first: number, width: number, buckets: number, table: string[],
 *   cells: string, skipped?: Skipped}} PackedView
 * @typedef {{label: string, first: number, width: number, table: string[], B: number,
 *   vals: number[], logs: number[], zmin: number, zmax: number, hi: Uint32Array,
 *   lo: Uint32Array, hiOff: Uint32Array, loOff: Uint32Array, status: Uint8Array,
 *   skipped: Skipped, skipAt: Map<number, number[]>, rowH?: number}} View
 */

/** [r, g, b] of "#rrggbb". @param {string} hex @returns {number[]} */
export function rgb(hex) {
  return [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
}

/** The bytes of zlib-compressed, base64-encoded data. @param {string} b64 */
export async function inflate(b64) {
  const bin = atob(b64), bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  const s = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(s).arrayBuffer());
}

/**
 * The k-th of the uint32 arrays of `n` values each, stored as 4 byte planes.
 * @param {Uint8Array} bytes @param {number} n @param {number} k
 */
export function uint32Plane(bytes, n, k) {
  const out = new Uint32Array(n), o = 4 * n * k;
  for (let i = 0; i < n; i++) {
    out[i] = (bytes[o + i] | (bytes[o + n + i] << 8) | (bytes[o + 2 * n + i] << 16) | (bytes[o + 3 * n + i] << 24)) >>> 0;
  }
  return out;
}

/**
 * Zigzag deltas along each of `rows` rows of `cols` back to codes (in place).
 * @param {Uint32Array} z @param {number} rows @param {number} cols
 */
export function undelta(z, rows, cols) {
  for (let r = 0; r < rows; r++) {
    let c = 0;
    for (let b = 0; b < cols; b++) { const i = r * cols + b; c += (z[i] >>> 1) ^ -(z[i] & 1); z[i] = c; }
  }
  return z;
}

/**
 * The decades the colour scale spans: every norm and every threshold line (a check turned off
 * is null and has no line), one decade of room around the lines; -9 … 2 when there is nothing.
 * @param {number[]} logs log10 of the norms @param {(number|null)[]} thresholds
 */
export function normRange(logs, thresholds) {
  let zmin = Infinity, zmax = -Infinity;
  for (const t of thresholds) {
    if (t !== null) { zmin = Math.min(zmin, Math.floor(Math.log10(t)) - 1); zmax = Math.max(zmax, Math.ceil(Math.log10(t)) + 1); }
  }
  for (const l of logs) { zmin = Math.min(zmin, Math.floor(l)); zmax = Math.max(zmax, Math.ceil(l)); }
  if (!isFinite(zmin)) { zmin = -9; zmax = 2; }
  return { zmin, zmax };
}

/**
 * One view's drawing, unpacked: hi/lo codes (1 + index into `table`, 0: none), their step
 * offsets in the bucket, and the status code of each (parameter, bucket) cell.
 * @param {PackedView} view @param {number} P parameters @param {(number|null)[]} thresholds
 * @returns {Promise<View>}
 */
export async function loadView(view, P, thresholds) {
  const bytes = await inflate(view.cells), B = view.buckets, n = P * B;
  const vals = view.table.map(Number);
  const logs = vals.map((v) => Math.log10(v));
  const skipped = view.skipped || { count: 0, first: [], buckets: [] };
  return { ...view, B, vals, logs, ...normRange(logs, thresholds), skipped, skipAt: skipIndex(skipped),
    hi: undelta(uint32Plane(bytes, n, 0), P, B), lo: undelta(uint32Plane(bytes, n, 1), P, B),
    hiOff: uint32Plane(bytes, n, 2), loOff: uint32Plane(bytes, n, 3), status: bytes.slice(16 * n, 17 * n) };
}

/**
 * Colour stops of the heat map, [position 0..1, colour]: the vanishing colours below the
 * vanishing line, healthy between the lines, exploding above.
 * @param {PageData} D @param {{zmin: number, zmax: number}} V
 * @returns {[number, string][]}
 */
export function colorStops(D, V) {
  const C = D.colors, span = Math.max(V.zmax - V.zmin, 1e-9);
  const at = (/** @type {number} */ l) => Math.min(Math.max((l - V.zmin) / span, 0), 1);
  const [tv, te] = D.thresholds;
  const van = tv === null ? 0 : at(Math.log10(tv)), exp = te === null ? 1 : Math.max(at(Math.log10(te)), van);
  return [[0, C.vanishing[1]], [van, C.vanishing[0]], [van, C.healthy[0]], [exp, C.healthy[1]],
    [exp, C.exploding[0]], [1, C.exploding[1]]];
}

/** [r, g, b] at position `t` of the stops. @param {[number, string][]} S @param {number} t */
export function colorAt(S, t) {
  for (let i = 1; i < S.length; i++) {
    if (t <= S[i][0]) {
      const [t0, c0] = S[i - 1], [t1, c1] = S[i], f = t1 > t0 ? (t - t0) / (t1 - t0) : 1;
      const a = rgb(c0), b = rgb(c1);
      return a.map((x, k) => Math.round(x + (b[k] - x) * f));
    }
  }
  return rgb(S[S.length - 1][1]);
}

/**
 * The norm code a cell is coloured by: its smallest where it dipped to vanishing, else its
 * largest. @param {string[]} statuses @param {View} V @param {number} i
 */
export function cellValue(statuses, V, i) {
  const s = statuses[V.status[i]];
  return s === "vanishing" && V.lo[i] ? V.lo[i] : V.hi[i] || V.lo[i];
}

/** About `n` round tick values from `lo` to `hi`. @param {number} lo @param {number} hi @param {number} n */
export function ticks(lo, hi, n) {
  const raw = (hi - lo) / n, p = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
  const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw) || p * 10;
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi; t += step) out.push(t);
  return out;
}

/** Bucket -> [bucket, skipped steps in it, the first of them]. @param {Skipped} skipped */
export function skipIndex(skipped) {
  return new Map(skipped.buckets.map((e) => [e[0], e]));
}

/**
 * Per bucket: 2 when the GradScaler skipped every one of its steps (its NaN/Inf cells were
 * never applied: drawn as skipped), 1 when it skipped some, 0 none.
 * @param {View} V @returns {Uint8Array}
 */
export function skipColumns(V) {
  const out = new Uint8Array(V.B);
  for (const [b, n] of V.skipped.buckets) if (b >= 0 && b < V.B) out[b] = n >= V.width ? 2 : 1;
  return out;
}

/**
 * What a bucket with skipped steps says (hover, axis mark), or "" when it has none:
 * "skipped by GradScaler (Inf/NaN gradients not applied …)" for one step, "3 of 10 steps skipped by
 * GradScaler, the first at step 20" for a bucket of several.
 * @param {PageData} D @param {View} V @param {number} b
 */
export function skipText(D, V, b) {
  const e = V.skipAt.get(b), label = D.skipped_label || "skipped";
  if (!e) return "";
  if (V.width === 1) return D.skipped_text ? `${label} (${D.skipped_text})` : label;
  const steps = e[1] === V.width ? `all ${count(e[1], "step")}` : `${e[1]} of ${count(V.width, "step")}`;
  return `${steps} ${label}${e[1] > 1 ? `, the first at step ${e[2]}` : ` (step ${e[2]})`}`;
}

/**
 * The page's summary line for view V of P parameters and `n` anomalies; the steps the
 * GradScaler skipped are counted and the first few named.
 * @param {PageData} D @param {View} V @param {number} P @param {number} n
 */
export function summaryText(D, V, P, n) {
  const parts = [count(P, "parameter"), `from step ${V.first}, ${count(V.B, "column")} of ${count(V.width, "step")}`,
    count(n, "anomaly", "anomalies")];
  const sk = V.skipped;
  if (sk.count) {
    const more = sk.count - sk.first.length;
    parts.push(`${count(sk.count, "step")} ${D.skipped_label || "skipped"}: ${sk.first.join(", ")}${more > 0 ? ` and ${more} more` : ""}`);
  }
  return parts.join(" · ");
}

/**
 * The hover text of cell (row r, bucket b).
 * @param {PageData} D @param {View} V @param {number} r @param {number} b
 */
export function cellText(D, V, r, b) {
  const i = r * V.B + b, s0 = V.first + b * V.width, s = D.statuses[V.status[i]];
  const steps = V.width > 1 ? `steps ${s0}–${s0 + V.width - 1}` : `step ${s0}`;
  const lines = [D.names[r], `${D.modules[r] || "(top level)"} · ${D.shapes[r]}`, steps];
  const why = s === "none" ? noneWhy(D, r, s0) : "";
  lines.push(s === undefined ? "no record" : `status: ${D.labels[s]}${why ? `: ${why}` : ""}`);
  const skip = skipText(D, V, b);
  if (skip) lines.push(skip);
  if (V.hi[i]) lines.push(`max ‖g‖ = ${V.table[V.hi[i] - 1]} at step ${s0 + V.hiOff[i]}`);
  if (V.lo[i] && V.width > 1) lines.push(`min ‖g‖ = ${V.table[V.lo[i] - 1]} at step ${s0 + V.loOff[i]}`);
  return lines.join("\n");
}

/**
 * The points of row `r`'s line, [step, index into the table], in step order, one per step.
 * @param {View} V @param {number} r @returns {[number, number][]}
 */
export function series(V, r) {
  /** @type {[number, number][]} */
  const pts = [];
  for (let b = 0; b < V.B; b++) {
    const i = r * V.B + b, s0 = V.first + b * V.width;
    if (V.lo[i]) pts.push([s0 + V.loOff[i], V.lo[i] - 1]);
    if (V.hi[i]) pts.push([s0 + V.hiOff[i], V.hi[i] - 1]);
  }
  pts.sort((a, b) => a[0] - b[0]);
  return pts.filter((p, k) => k === 0 || p[0] !== pts[k - 1][0]);
}

/**
 * For each point of `series`, whether a line must not join it to the one before: a bucket
 * between them had no norm to draw (None, 0.0, NaN/Inf), so the line leaves a gap there.
 * @param {View} V @param {[number, number][]} pts @returns {boolean[]}
 */
export function breaks(V, pts) {
  const bucket = (/** @type {number} */ s) => Math.floor((s - V.first) / V.width);
  return pts.map(([s], j) => j === 0 || bucket(s) - bucket(pts[j - 1][0]) > 1);
}

/**
 * Runs of buckets of row `r` whose status has no norm to draw (None, 0.0, NaN/Inf: `plain`),
 * as [first bucket, last bucket, status]: the bands under the lines.
 * @param {PageData} D @param {View} V @param {number} r @returns {[number, number, string][]}
 */
export function plainRuns(D, V, r) {
  const plain = new Set(D.plain);
  /** @type {[number, number, string][]} */
  const out = [];
  for (let b = 0; b < V.B; b++) {
    const s = D.statuses[V.status[r * V.B + b]];
    if (!plain.has(s)) continue;
    let e = b;
    while (e + 1 < V.B && D.statuses[V.status[r * V.B + e + 1]] === s) e++;
    out.push([b, e, s]);
    b = e;
  }
  return out;
}

/**
 * The selection after a click on row `r`: it comes first, at most `max` lines.
 * @param {number[]} selected @param {number} r @param {number} max
 */
export function withRow(selected, r, max) {
  return [r, ...selected.filter((x) => x !== r)].slice(0, max);
}

/**
 * The palette slot of each line shown, row -> slot: a line keeps its slot for as long as it
 * stays shown, a new line takes the lowest slot no shown line uses, and a line no longer
 * shown frees its slot. With more lines than slots (never on the page: as many slots as
 * lines), the extra ones share the least used slot.
 * @param {Map<number, number>} prev the slots of the lines shown before
 * @param {number[]} selected the rows shown now @param {number} n slots
 * @returns {Map<number, number>}
 */
export function lineSlots(prev, selected, n) {
  /** @type {Map<number, number>} */
  const out = new Map();
  const uses = new Array(n).fill(0);
  for (const r of selected) {
    const s = prev.get(r);
    if (s !== undefined && s < n && !uses[s] && !out.has(r)) { out.set(r, s); uses[s]++; }
  }
  for (const r of selected) {
    if (out.has(r)) continue;
    const s = uses.indexOf(Math.min(...uses));  // the lowest free slot, or the least used
    out.set(r, s); uses[s]++;
  }
  return out;
}

/** "1 anomaly", "2 anomalies": `n` and the word that agrees with it.
 * @param {number} n @param {string} one @param {string} [many] (default: `one` + "s") */
export function count(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

const SUPERSCRIPT = { "-": "⁻", 0: "⁰", 1: "¹", 2: "²", 3: "³", 4: "⁴", 5: "⁵", 6: "⁶", 7: "⁷", 8: "⁸", 9: "⁹" };

/** A power of ten as text: decade(-8) is "10⁻⁸". @param {number} e an integer */
export function decade(e) {
  return `10${Array.from(String(e), (c) => /** @type {Record<string, string>} */ (SUPERSCRIPT)[c] ?? c).join("")}`;
}

/**
 * Tops (px) of labels `size` px tall for `rows` (ascending) of `rowH` px in a column `height`
 * px tall: each centred on its row where it fits, pushed down past the label above it, and the
 * last ones pushed back up to stay inside (adjacent leading rows had their labels overlap).
 * @param {number[]} rows @param {number} rowH @param {number} height @param {number} size
 * @returns {number[]}
 */
export function sparseTops(rows, rowH, height, size) {
  const tops = [];
  for (const r of rows) {
    const want = Math.max(0, r * rowH + rowH / 2 - size / 2);
    tops.push(tops.length ? Math.max(want, tops[tops.length - 1] + size) : want);
  }
  for (let i = tops.length - 1, limit = height - size; i >= 0; i--, limit -= size) {
    tops[i] = Math.max(0, Math.min(tops[i], limit));
  }
  return tops;
}

/**
 * Anomalies (in step order) grouped for their labels: one after another less than `minPx` to
 * the right of the group's first starts no label of its own (labels a few steps apart piled
 * up over each other, and a long run's were cut at 40).
 * @template T
 * @param {T[]} items @param {(item: T) => number} px  each one's x on screen
 * @param {number} minPx
 * @returns {T[][]}
 */
export function markGroups(items, px, minPx) {
  /** @type {T[][]} */
  const groups = [];
  let start = -Infinity;
  for (const it of items) {
    const at = px(it);
    if (groups.length && at - start < minPx) groups[groups.length - 1].push(it);
    else { groups.push([it]); start = at; }
  }
  return groups;
}

/**
 * `text` shortened to `limit` characters by an ellipsis in the middle: both ends of a long
 * dotted name stay readable (its row's hover shows it whole). As render/elide.elide_middle.
 * @param {string} text @param {number} limit @returns {string}
 */
export function elideMiddle(text, limit) {
  if (text.length <= limit) return text;
  const head = Math.floor((limit - 1) / 2), tail = limit - 1 - head;
  return `${text.slice(0, head)}…${text.slice(text.length - tail)}`;
}

/**
 * Why row `r` reads None at `step`, in Python's words (`none_words`, e.g. "frozen") from
 * its `none_why`; "" for pages without it.
 * @param {PageData} D @param {number} r @param {number} step @returns {string}
 */
export function noneWhy(D, r, step) {
  const changes = D.none_why?.[r] ?? [];
  let code = D.none_why ? 1 : 0; // no event: a trainable parameter
  for (const [at, c] of changes) if (at <= step) code = c;
  return D.none_words?.[code] ?? "";
}
