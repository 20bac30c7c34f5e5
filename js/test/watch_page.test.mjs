// The offline watch page's data handling (watch_data.js) and the built page script: cells
// packed as gradviz_widgets/watch/page_data.py packs them (zigzag deltas per row, uint32 byte
// planes, then uint8 statuses, zlib, base64) come back as the same codes.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { deflateSync } from "node:zlib";
import {
  breaks, cellText, elideMiddle, noneWhy, cellValue, colorAt, colorStops, count, decade, lineSlots, loadView, normRange, plainRuns, rgb, series,
  skipColumns, skipText, summaryText, ticks, undelta, withRow,
} from "../watch_data.js";

const STATUSES = ["none", "zero", "vanishing", "healthy", "exploding", "nonfinite"];
const code = (/** @type {string} */ s) => STATUSES.indexOf(s);

/** page_data.deltas + pack, in JS: rows of hi/lo codes, offsets and statuses -> base64. */
function pack(/** @type {number[][][]} */ u32s, /** @type {number[][]} */ status) {
  const n = status.flat().length, planes = [];
  for (const a of u32s) {
    const flat = a.flat();
    for (let byte = 0; byte < 4; byte++) planes.push(...flat.map((v) => (v >>> (8 * byte)) & 255));
  }
  const raw = Uint8Array.from([...planes, ...status.flat()]);
  assert.equal(raw.length, 17 * n);
  return deflateSync(raw).toString("base64");
}
const zigzag = (/** @type {number[][]} */ rows) => rows.map((r) => r.map((c, i) => {
  const d = c - (i ? r[i - 1] : 0);
  return d >= 0 ? 2 * d : -2 * d - 1;
}));

const TABLE = ["1e-09", "0.5", "2", "7e+04"];
const HI = [[2, 3, 0], [4, 0, 1]], LO = [[1, 2, 0], [4, 0, 1]];
const HI_OFF = [[3, 0, 0], [1, 0, 70000]], LO_OFF = [[0, 1, 0], [1, 0, 70000]];
const STATUS = [[code("vanishing"), code("healthy"), code("none")], [code("exploding"), code("nonfinite"), 6]];
const VIEW = { label: "", first: 10, width: 4, buckets: 3, table: TABLE,
  cells: pack([zigzag(HI), zigzag(LO), HI_OFF, LO_OFF], STATUS) };
const DATA = {
  statuses: STATUSES, plain: ["none", "zero", "nonfinite"], names: ["a.weight", "b.bias"],
  modules: ["a", ""], shapes: ["3 x 2", "2"], thresholds: [1e-7, 1e4], threshold_text: ["1e-07", "1e+04"],
  colors: { vanishing: ["#d6e9f8", "#0072b2"], healthy: ["#d5f0e6", "#009e73"], exploding: ["#fbe5c8", "#e69f00"],
    none: ["#ffffff", "#9a9a9a"], zero: ["#e6e6e6", "#000000"], nonfinite: ["#f6cdb8", "#d55e00"] },
  labels: { vanishing: "vanishing", healthy: "healthy", exploding: "exploding", none: "no gradient (None)",
    zero: "exactly 0.0", nonfinite: "NaN / Inf" },
};

test("packed cells come back as the codes, offsets and statuses Python packed", async () => {
  const V = await loadView(VIEW, 2, DATA.thresholds);
  assert.deepEqual(Array.from(V.hi), HI.flat());
  assert.deepEqual(Array.from(V.lo), LO.flat());
  assert.deepEqual(Array.from(V.hiOff), HI_OFF.flat());  // a large offset survives the 4 planes
  assert.deepEqual(Array.from(V.loOff), LO_OFF.flat());
  assert.deepEqual(Array.from(V.status), STATUS.flat());
  assert.deepEqual(V.vals, [1e-9, 0.5, 2, 7e4]);
  // the scale spans every norm and one decade around each threshold line
  assert.deepEqual([V.zmin, V.zmax], [-9, 5]);
});

test("zigzag deltas decode down and up along each row, not across rows", () => {
  assert.deepEqual(Array.from(undelta(Uint32Array.from([10, 2, 3, 4, 1]), 1, 5)), [5, 6, 4, 6, 5]);
  assert.deepEqual(Array.from(undelta(Uint32Array.from([2, 2, 4, 1]), 2, 2)), [1, 2, 2, 1]);
});

test("the range falls back to 1e-9 … 1e2 without norms or lines, and skips lines turned off", () => {
  assert.deepEqual(normRange([], [null, null]), { zmin: -9, zmax: 2 });
  assert.deepEqual(normRange([0.3], [null, 1e4]), { zmin: 0, zmax: 5 });
});

test("the colour scale: vanishing below its line, healthy between, exploding above", async () => {
  const V = await loadView(VIEW, 2, DATA.thresholds);
  const S = colorStops(DATA, V);
  const at = (/** @type {number} */ norm) => colorAt(S, (Math.log10(norm) - V.zmin) / (V.zmax - V.zmin));
  assert.deepEqual(S[0], [0, "#0072b2"]);
  assert.deepEqual(at(1e-9), rgb("#0072b2"));  // the bottom of the scale: the vanishing line colour
  assert.deepEqual(at(1e5), rgb("#e69f00"));
  const mid = at(1);
  assert.ok(mid.every((c, k) => c >= Math.min(rgb("#d5f0e6")[k], rgb("#009e73")[k])
    && c <= Math.max(rgb("#d5f0e6")[k], rgb("#009e73")[k])), `healthy colours only: ${mid}`);
  // a check turned off (null) moves its stop to the end of the scale
  const off = colorStops({ ...DATA, thresholds: [null, null] }, V);
  assert.equal(off[1][0], 0);
  assert.equal(off[3][0], 1);
});

test("a vanishing cell is coloured by its smallest norm, others by their largest", async () => {
  const V = await loadView(VIEW, 2, DATA.thresholds);
  assert.equal(cellValue(STATUSES, V, 0), 1);  // vanishing: lo
  assert.equal(cellValue(STATUSES, V, 1), 3);  // healthy: hi
  assert.equal(cellValue(STATUSES, V, 2), 0);  // nothing recorded
});

test("the hover text of a cell names the parameter, the steps and Python's norm text", async () => {
  const V = await loadView(VIEW, 2, DATA.thresholds);
  assert.equal(cellText(DATA, V, 0, 0),
    "a.weight\na · 3 x 2\nsteps 10–13\nstatus: vanishing\nmax ‖g‖ = 0.5 at step 13\nmin ‖g‖ = 1e-09 at step 10");
  assert.equal(cellText(DATA, V, 1, 2).split("\n").slice(1, 4).join("|"), "(top level) · 2|steps 18–21|no record");
});

const SKIP_WORDS = { skipped_label: "skipped by GradScaler", skipped_text: "Inf/NaN gradients not applied, no update" };

test("a view without skipped steps (older pages' data) reads as none: no column, no words", async () => {
  const V = await loadView(VIEW, 2, DATA.thresholds);
  assert.deepEqual(V.skipped, { count: 0, first: [], buckets: [] });
  assert.deepEqual(Array.from(skipColumns(V)), [0, 0, 0]);
  assert.equal(skipText({ ...DATA, ...SKIP_WORDS }, V, 1), "");
  assert.equal(summaryText(DATA, V, 2, 1), "2 parameters · from step 10, 3 columns of 4 steps · 1 anomaly");
});

test("skipped steps: whole and partly skipped columns, their hover and the summary", async () => {
  const D = { ...DATA, ...SKIP_WORDS };
  // steps 10-13 all skipped (bucket 0), one of 14-17 (bucket 1); 12 skips in all, 8 named
  const skipped = { count: 12, first: [10, 11, 12, 13, 15, 30, 31, 40], buckets: [[0, 4, 10], [1, 1, 15]] };
  const V = await loadView({ ...VIEW, skipped }, 2, DATA.thresholds);
  assert.deepEqual(Array.from(skipColumns(V)), [2, 1, 0]);
  assert.equal(skipText(D, V, 0), "all 4 steps skipped by GradScaler, the first at step 10");
  assert.equal(skipText(D, V, 1), "1 of 4 steps skipped by GradScaler (step 15)");
  assert.equal(skipText(D, V, 2), "");
  assert.deepEqual(cellText(D, V, 0, 1).split("\n").slice(2, 5),
    ["steps 14–17", "status: healthy", "1 of 4 steps skipped by GradScaler (step 15)"]);
  assert.doesNotMatch(cellText(D, V, 0, 2), /skipped/);
  assert.equal(summaryText(D, V, 2, 3),
    "2 parameters · from step 10, 3 columns of 4 steps · 3 anomalies · 12 steps skipped by GradScaler: 10, 11, 12, 13, 15, 30, 31, 40 and 4 more");
  // one step a column: the step's own words
  const one = { ...V, width: 1, skipAt: new Map([[2, [2, 1, 12]]]), skipped: { count: 1, first: [12], buckets: [[2, 1, 12]] } };
  assert.deepEqual(Array.from(skipColumns(one)), [0, 0, 2]);
  assert.equal(skipText(D, one, 2), "skipped by GradScaler (Inf/NaN gradients not applied, no update)");
  assert.match(cellText(D, one, 1, 2), /^b\.bias\n.*\nstep 12\nno record\nskipped by GradScaler \(Inf\/NaN/s);
  assert.equal(summaryText(D, one, 2, 0).split(" · ").pop(), "1 step skipped by GradScaler: 12");
});

test("a line's points are in step order, one per step", async () => {
  const V = await loadView(VIEW, 2, DATA.thresholds);
  assert.deepEqual(series(V, 0), [[10, 0], [13, 1], [14, 2], [15, 1]]);
  assert.deepEqual(series(V, 1), [[11, 3], [70018, 0]]);  // hi and lo at the same step: one point
});

test("a line breaks where a bucket between two points had no norm (a NaN step: a gap)", async () => {
  const V = await loadView(VIEW, 2, DATA.thresholds);
  assert.deepEqual(breaks(V, series(V, 0)), [true, false, false, false]);  // buckets 0, 0, 1, 1
  const sparse = /** @type {any} */ ({ first: 0, width: 2 });
  // buckets 0, 0, 3, 4: nothing drawable in buckets 1 and 2
  assert.deepEqual(breaks(sparse, [[0, 0], [1, 0], [6, 0], [8, 0]]), [true, false, true, false]);
});

test("bands: runs of None / 0.0 / NaN buckets, by status", () => {
  const V = /** @type {any} */ ({ B: 5, status: Uint8Array.from([0, 0, 5, 3, 1]) });
  assert.deepEqual(plainRuns(DATA, V, 0), [[0, 1, "none"], [2, 2, "nonfinite"], [4, 4, "zero"]]);
});

test("ticks are round numbers inside the range; a clicked row comes first", () => {
  assert.deepEqual(ticks(0, 100, 5), [0, 20, 40, 60, 80, 100]);
  assert.deepEqual(ticks(3, 9, 8), [3, 4, 5, 6, 7, 8, 9]);
  assert.deepEqual(withRow([1, 2, 3], 3, 3), [3, 1, 2]);
  assert.deepEqual(withRow([1, 2, 3], 7, 3), [7, 1, 2]);
});

test("a line keeps its colour while shown; a new line takes a free one; a removed line frees its colour", () => {
  const N = 6;
  // the first drawing: the page's selection in order, colours 0, 1, 2, ...
  let shown = [4, 0, 1, 2, 3];
  let slots = lineSlots(new Map(), shown, N);
  assert.deepEqual([...slots], [[4, 0], [0, 1], [1, 2], [2, 3], [3, 4]]);
  const before = new Map(slots);
  // a click on row 5 puts it first: every line shown keeps its colour, row 5 takes the free one
  shown = withRow(shown, 5, N);
  slots = lineSlots(slots, shown, N);
  for (const [r, s] of before) assert.equal(slots.get(r), s, `row ${r} changed colour`);
  assert.equal(slots.get(5), 5);
  assert.equal(new Set(slots.values()).size, shown.length, "two lines share a colour");
  // drawn again (resize, another view): nothing moves
  const sorted = (/** @type {Map<number, number>} */ m) => [...m].sort((x, y) => x[0] - y[0]);
  assert.deepEqual(sorted(lineSlots(slots, shown, N)), sorted(slots));
  // row 1 taken off in the list frees its colour; the next new line takes it
  shown = shown.filter((r) => r !== 1);
  slots = lineSlots(slots, shown, N);
  assert.equal(slots.has(1), false);
  shown = withRow(shown, 7, N);
  slots = lineSlots(slots, shown, N);
  assert.equal(slots.get(7), 2);
  // a click at the limit drops the last line; the new one takes the dropped one's colour
  const full = new Map(slots), dropped = shown[shown.length - 1];
  shown = withRow(shown, 6, N);
  slots = lineSlots(slots, shown, N);
  assert.equal(slots.get(6), full.get(dropped));
  for (const r of shown) if (r !== 6) assert.equal(slots.get(r), full.get(r));
  // a clicked line already shown moves first and keeps its colour
  const again = lineSlots(slots, withRow(shown, 4, N), N);
  assert.equal(again.get(4), slots.get(4));
  // more lines than colours: every line still gets one, the least used
  assert.deepEqual([...lineSlots(new Map(), [9, 8, 7], 2)], [[9, 0], [8, 1], [7, 0]]);
});

test("counts agree with their word; the scale's decades read as powers of ten", () => {
  assert.equal(count(1, "anomaly", "anomalies"), "1 anomaly");
  assert.equal(count(0, "anomaly", "anomalies"), "0 anomalies");
  assert.equal(count(2, "parameter"), "2 parameters");
  assert.equal(count(1, "step"), "1 step");
  assert.equal(decade(-8), "10⁻⁸");
  assert.equal(decade(5), "10⁵");
  assert.equal(decade(0), "10⁰");
  assert.equal(decade(-12), "10⁻¹²");
});

test("the built page script is one module without imports, requests or a copy of the statuses", () => {
  const built = readFileSync(fileURLToPath(new URL("../../gradviz_widgets/static/watch_page.js", import.meta.url)), "utf8");
  assert.doesNotMatch(built, /\bimport\b|\bexport\b|fetch\(|https?:\/\/(?!www\.w3\.org)/);
  assert.doesNotMatch(built, /"vanishing gradient"|"NaN \/ Inf"|"exactly 0\.0"/);
});

test("sparse row labels sit at their rows, never overlap, never leave the column", async () => {
  const { sparseTops } = await import("../watch_data.js");
  // rows 0 (would start above the column), 164 and 165 (adjacent), rowH 3, 12 px labels
  const tops = sparseTops([0, 164, 165], 3, 510, 12);
  assert.equal(tops[0], 0);
  assert.ok(Math.abs(tops[1] - (164 * 3 + 1.5 - 6)) <= 12, String(tops)); // near its row
  assert.ok(tops[2] - tops[1] >= 12, String(tops)); // below its neighbour, not over it
  assert.ok(tops.every((t) => t >= 0 && t <= 510 - 12), String(tops));
  // the last rows of the column: pushed back up inside it
  const end = sparseTops([128, 129], 3, 390, 12);
  assert.ok(end[1] <= 390 - 12 && end[0] <= end[1] - 12, String(end));
});

test("anomaly labels: one per group of nearby ones, every one kept (a long run's were cut at 40)", async () => {
  const { markGroups } = await import("../watch_data.js");
  const items = [[10], [12], [105], [300], [301], [302], [900]];
  const groups = markGroups(items, (a) => a[0], 90);
  assert.deepEqual(groups.map((g) => g.map((a) => a[0])), [[10, 12], [105], [300, 301, 302], [900]]);
  assert.equal(groups.flat().length, items.length);
});

test("a long name is elided in the middle, both ends kept, as Python's elide_middle", () => {
  assert.equal(elideMiddle("transformer.h.11.attn.c_attn.weight", 24), "transformer…_attn.weight");
  assert.equal(elideMiddle("short.weight", 24), "short.weight");
  const long = `${"_fsdp_wrapped_module.".repeat(6)}layers.3.q_proj.lora_A.default.weight`;
  const shown = elideMiddle(long, 30);
  assert.equal(shown.length, 30);
  assert.ok(shown.endsWith("a_A.default.weight".slice(-15)) && shown.startsWith("_fsdp_wrap"));
});

test("a None cell says why: frozen, removed, or trainable but reached by no gradient", () => {
  const D = { ...DATA, none_why: [[[0, 2], [5, 1]], []], none_words: ["", "trainable, but no gradient reached it", "frozen", "removed"] };
  assert.equal(noneWhy(D, 0, 3), "frozen");
  assert.equal(noneWhy(D, 0, 7), "trainable, but no gradient reached it");  // unfrozen at 5
  assert.equal(noneWhy(D, 1, 7), "trainable, but no gradient reached it");  // no event
  assert.equal(noneWhy(DATA, 0, 3), "");  // an older page: says nothing it does not know
});
