// The first view's pure parts: where a too-big graph opens, what search finds folded away.
import assert from "node:assert/strict";
import { test } from "node:test";
import { clusterLabels, findingRank, fitBox, fitMeasured, measuredSize, readableBox, wholeNodesBox } from "../pan_zoom.js";
import { findMatches, foldedMatches, indexEntries } from "../search.js";

test("readableBox: a wide graph opens on the busiest part of its top band, not its left edge", () => {
  const base = { x: 0, y: 0, w: 2000, h: 3000 };
  // an empty cluster margin on the left; the top band's nodes sit around x = 1200..1500
  const centres = [{ x: 1200, y: 40 }, { x: 1350, y: 60 }, { x: 1500, y: 50 }, { x: 100, y: 2500 }];
  const box = readableBox(base, 10, 800, 500, centres);
  assert.equal(box.y, -10);
  assert.ok(box.x <= 1200 && box.x + box.w >= 1500, JSON.stringify(box));
  // a graph narrower than the view is centred
  const narrow = readableBox({ x: 0, y: 0, w: 300, h: 3000 }, 6, 800, 500, centres);
  assert.equal(narrow.x, 150 - 400);
  // never beyond the graph's right edge
  const edge = readableBox(base, 10, 800, 500, [{ x: 1990, y: 10 }]);
  assert.equal(edge.x + edge.w, 2010);
});

test("readableBox: a huge graph's margin never fills the readable window (a 1,200-layer chain was blank)", () => {
  const base = { x: 0, y: 0, w: 54398, h: 24205 };
  const pad = Math.max(base.w, base.h) * 0.02; // the whole-graph margin: 1,088 units
  const centres = [{ x: 300, y: 40 }, { x: 340, y: 120 }, { x: 380, y: 200 }];
  const box = readableBox(base, pad, 750, 562, centres);
  assert.ok(box.y + box.h > base.y + 400, "the window reaches well into the graph");
  assert.ok(box.y >= base.y - 0.05 * 562 - 1e-9);
  assert.ok(centres.every((c) => c.x >= box.x && c.x <= box.x + box.w && c.y <= box.y + box.h));
});

test("readableBox: the busiest window moves to show a module label whole, not cut at its left", () => {
  const base = { x: 0, y: 0, w: 2000, h: 3000 };
  const centres = [{ x: 1200, y: 40 }, { x: 1350, y: 60 }, { x: 1500, y: 50 }];
  // the nodes' cluster label starts left of where the busiest window would begin (950)
  const label = { x: 900, y: 20, w: 200 };
  const plain = readableBox(base, 10, 800, 500, centres);
  assert.ok(plain.x > label.x && plain.x < label.x + label.w, "the old window cut it");
  const box = readableBox(base, 10, 800, 500, centres, [label]);
  assert.ok(box.x <= label.x && box.x + box.w >= label.x + label.w, JSON.stringify(box));
  assert.ok(box.x + box.w >= 1500, "still every node of the band");
  // a label whose whole showing would lose nodes is left out of the window, never cut
  const far = { x: 400, y: 20, w: 200 };
  const nodes = [{ x: 650, y: 40 }, { x: 800, y: 40 }, { x: 1300, y: 40 }, { x: 1350, y: 40 }];
  const out = readableBox(base, 10, 800, 500, nodes, [far]);
  assert.ok(out.x >= far.x + far.w || out.x <= far.x, JSON.stringify(out));
  // labels below the window's height do not move it
  const low = readableBox(base, 10, 800, 500, centres, [{ x: 900, y: 2000, w: 200 }]);
  assert.deepEqual(low, plain);
});

test("clusterLabels: each module label's left end, baseline and width, in the graph's units", () => {
  const text = (x, y, anchor, content) => ({
    getAttribute: (k) => ({ x: String(x), y: String(y), "font-size": "10", "text-anchor": anchor })[k] ?? null,
    getBBox: () => { throw new Error("no layout"); },
    textContent: content,
  });
  const svg = {
    querySelector: () => ({ getAttribute: () => "scale(1 1) rotate(0) translate(4 300)" }),
    querySelectorAll: () => [text(10, -280, "start", "abcde"), text(100, -200, "middle", "ab")],
  };
  assert.deepEqual(clusterLabels(svg), [{ x: 14, y: 20, w: 30 }, { x: 98, y: 100, w: 12 }]);
});

test("search: names folded into a node match it once, and say what they hide", () => {
  const index = [
    ["h.0.attn.c_attn", "module", "group:h.0-3", "folded"],
    ["h.0.attn.c_attn.weight", "param", "group:h.0-3", "folded"],
    ["h.1.attn.c_attn.weight", "param", "group:h.0-3", "folded"],
    ["wte", "module", "module:wte", ""],
    ["lost", "param", "", ""],
  ];
  const entries = [{ id: "group:h.0-3", label: "h.0–3 ×4" }, ...indexEntries(index)];
  assert.deepEqual(findMatches("c_attn", entries), ["group:h.0-3"]);
  assert.equal(foldedMatches("c_attn", entries).get("group:h.0-3"), "h.0.attn.c_attn");
  assert.deepEqual(findMatches("wte", entries), ["module:wte"]);
  assert.equal(foldedMatches("wte", entries).size, 0);
  assert.equal(foldedMatches("×4", entries).size, 0); // the node's own label: nothing hidden
  assert.deepEqual(indexEntries("not a list"), []);
});

test("measuredSize: only a laid-out viewport has a size to choose a fold depth from", () => {
  assert.equal(measuredSize({ width: 893.4, height: 521.6 }), "893x522");
  assert.equal(measuredSize({ width: 0, height: 0 }), ""); // detached, display: none
  assert.equal(measuredSize({ width: 893, height: 0 }), ""); // collapsed output
  assert.equal(measuredSize({ width: 12, height: 520 }), ""); // not laid out yet
  assert.ok(fitMeasured({ width: 848, height: 642 }));
  assert.ok(!fitMeasured({ width: 0, height: 642 }));
});

test("fitBox: a small graph opens whole at the top of a tall pane, not in its middle", () => {
  // the 'x1200' group and the loss: 240 x 92 units in an 846 x 522 px pane (1280x800, file
  // browser open); centred, it sat 200 px down the pane, below the window's edge
  const base = { x: 0, y: 0, w: 240, h: 92 };
  const { box, scale } = fitBox(base, 4.8, 846, 522);
  assert.equal(scale, 1.5); // not blown up beyond MAX_FIT_SCALE
  assert.equal(box.y, -4.8); // the graph's top (with its margin) at the pane's top
  assert.ok(Math.abs(box.x + box.w / 2 - 120) < 1e-9); // centred across
  assert.ok(Math.abs(box.w / box.h - 846 / 522) < 1e-9); // the pane's shape: scale() = 1.5
  assert.ok(box.x <= -4.8 && box.x + box.w >= 244.8 && box.y + box.h >= 96.8); // all of it
  // a wide, low graph (a group label of several long lines) fits on width: still at the top
  const wide = fitBox({ x: 0, y: 0, w: 2000, h: 120 }, 40, 846, 522);
  assert.ok(Math.abs(wide.scale - 846 / 2080) < 1e-9);
  assert.equal(wide.box.y, -40);
  assert.ok(Math.abs(wide.box.x - -40) < 1e-9 && Math.abs(wide.box.w - 2080) < 1e-9);
  // a tall graph fits on height and fills the pane, as before
  const tall = fitBox({ x: 0, y: 0, w: 300, h: 3000 }, 60, 846, 522);
  assert.equal(tall.box.y, -60);
  assert.ok(Math.abs(tall.box.h - 3120) < 1e-9);
  // no size yet: the padded graph, scale 0
  assert.deepEqual(fitBox(base, 4, 0, 0), { box: { x: -4, y: -4, w: 248, h: 100 }, scale: 0 });
});

test("readableBox: a diagonal graph opens with its top row in view, not its busy middle", () => {
  // a staircase: the top module's nodes at the right, each lower one further left (the hostile
  // names' model at fold "full": its top module, with the run's only finding, was cut off)
  const base = { x: 0, y: 0, w: 2000, h: 3000 };
  const centres = [{ x: 1800, y: 30 }, { x: 1900, y: 40 }];
  for (let i = 0; i < 12; i++) centres.push({ x: 1500 - 60 * i, y: 120 + 30 * i });
  const box = readableBox(base, 10, 700, 500, centres);
  assert.ok(box.x <= 1800 && box.x + box.w >= 1900, JSON.stringify(box));
  // a top row wider than the window leaves the busiest window as it was
  const wide = [{ x: 100, y: 10 }, { x: 1900, y: 10 }, { x: 1000, y: 200 }, { x: 1050, y: 220 }];
  const open = readableBox(base, 10, 700, 500, wide);
  assert.ok(open.x <= 1000 && open.x + open.w >= 1050, JSON.stringify(open));
});

/** @returns {{x: number, y: number, w: number, h: number, rank: number}} */
const node = (x, y, rank = 0, w = 80, h = 30) => ({ x, y, w, h, rank });
const centreOf = (n) => ({ x: n.x + n.w / 2, y: n.y + n.h / 2 });
const cutAtSide = (b, nodes) => nodes.filter((n) => n.y < b.y + b.h && n.y + n.h > b.y
  && ((n.x < b.x && n.x + n.w > b.x) || (n.x < b.x + b.w && n.x + n.w > b.x + b.w)));
const whole = (b, n) => n.x >= b.x && n.x + n.w <= b.x + b.w && n.y >= b.y && n.y + n.h <= b.y + b.h;

test("findingRank: the node info's alarm (ranked in Python), 0 without one", () => {
  assert.deepEqual([5, 1].map((alarm) => findingRank({ alarm })), [5, 1]);
  assert.equal(findingRank({}), 0);
  assert.equal(findingRank(undefined), 0);
  assert.equal(findingRank({ alarm: "5" }), 0); // only a number counts
});

test("readableBox: the top band opens on whole nodes, none cut at the window's sides", () => {
  // a short top row at the right, busier rows under it: the window that held the top row cut
  // a node of the row under it in half at each side
  const base = { x: 0, y: 0, w: 2000, h: 600 };
  const nodes = [node(1500, 10), node(1600, 10), node(1700, 10)];
  for (let i = 0; i < 10; i++) nodes.push(node(1000 + 100 * i, 200));
  for (let i = 0; i < 8; i++) nodes.push(node(300 + 100 * i, 400));
  const centres = nodes.map(centreOf);
  const plain = readableBox(base, 10, 700, 300, centres);
  assert.equal(cutAtSide(plain, nodes).length, 2, "the old window cut a node at each side");
  const box = readableBox(base, 10, 700, 300, centres, [], nodes);
  assert.deepEqual(cutAtSide(box, nodes), [], JSON.stringify(box));
  assert.equal(box.y, plain.y); // nothing worse to look for: still the top
  assert.ok(nodes.slice(0, 3).every((n) => whole(box, n)), "the top row still in view");
  assert.ok(Math.abs(box.x - plain.x) < 100, "near where it was");
});

test("readableBox: a top row of frozen weights gives way to the NaN layer further down", () => {
  // the 7-layer statuses model: frozen / never-called weights (no gradient) along the top
  // right, the NaN and exploding layers lower left, the loss at the bottom
  const base = { x: 0, y: 0, w: 1200, h: 700 };
  const nodes = [node(700, 10, 2), node(800, 10, 2), node(1000, 10, 2), node(1100, 10, 2),
    node(900, 10), node(900, 100), node(900, 200), node(550, 150, 3), node(550, 250, 3),
    node(400, 250, 1), node(400, 330), node(20, 300, 5), node(120, 300, 5), node(70, 380, 5),
    node(70, 450, 5), node(220, 300, 4), node(220, 380, 4), node(220, 450), node(150, 600)];
  const centres = nodes.map(centreOf);
  const box = readableBox(base, 10, 800, 400, centres, [], nodes);
  const nan = nodes.filter((n) => n.rank === 5);
  assert.ok(nan.every((n) => whole(box, n)), JSON.stringify(box)); // every NaN node, whole
  assert.ok(nodes.filter((n) => n.rank === 4).every((n) => whole(box, n)), "and the exploding ones");
  assert.deepEqual(cutAtSide(box, nodes), [], JSON.stringify(box));
  assert.ok(box.x >= -10 && box.y >= -10 && box.x + box.w <= 1210 && box.y + box.h <= 710);
  // when the top shows every node of the worst status, it stays the top
  const frozenTop = nodes.map((n) => ({ ...n, rank: n.y === 10 ? n.rank : Math.min(n.rank, 1) }));
  const top = readableBox(base, 10, 800, 400, centres, [], frozenTop);
  assert.equal(top.y, -10);
  assert.ok(frozenTop.filter((n) => n.rank === 2).every((n) => whole(top, n)), JSON.stringify(top));
});

test("readableBox: where every window cuts a node, it narrows (zooms in) to open on whole ones", () => {
  // a frozen stage's folded modules along the top, wide boxes with narrow gaps between them
  // (the ResNet whose 'layer1.0.bn1' box was cut at the right edge), a column of layers below
  const base = { x: 0, y: 0, w: 2900, h: 950 };
  const nodes = [];
  for (let i = 0; i < 8; i++) nodes.push(node(480 + 240 * i, 70, 2, 220));
  for (let i = 0; i < 10; i++) nodes.push(node(40 + 20 * (i % 3), 150 + 60 * i, 0, 200));
  const centres = nodes.map(centreOf);
  const plain = readableBox(base, 26, 848, 522, centres);
  assert.ok(cutAtSide(plain, nodes).length > 0, "the old window cut a node");
  const box = readableBox(base, 26, 848, 522, centres, [], nodes);
  assert.deepEqual(cutAtSide(box, nodes), [], JSON.stringify(box));
  assert.ok(box.w >= 0.75 * 848 - 1e-9 && box.w <= 848, "zoomed in by a third at most");
  assert.ok(Math.abs(box.w / box.h - 848 / 522) < 1e-9, "the viewport's shape");
  const shown = nodes.filter((n) => n.rank === 2 && whole(box, n)).length;
  assert.ok(shown >= 3, `the frozen boxes in view: ${shown}`);
});

test("wholeNodesBox: a graph narrower than the window, or with no boxes, keeps the window", () => {
  const box = { x: -100, y: -5, w: 800, h: 400 };
  assert.deepEqual(wholeNodesBox(box, { x: -5, y: -5, w: 300, h: 900 }, []), box);
  const nodes = [node(0, 0), node(0, 800, 5)];
  const moved = wholeNodesBox(box, { x: -5, y: -5, w: 300, h: 900 }, nodes);
  assert.equal(moved.x, box.x); // across: nothing to cut
  assert.ok(whole(moved, nodes[1]), JSON.stringify(moved)); // down to the NaN node
});

test("wholeNodesBox: a window with no whole node is never the first view, however clean", () => {
  // all healthy (no rank): the window the top band chose holds nothing (a wide frame's empty
  // stretch); it moves onto the nodes even where every place there cuts one
  const box = { x: 0, y: 0, w: 100, h: 100 };
  const area = { x: 0, y: 0, w: 1000, h: 100 };
  const nodes = [
    { x: 480, y: 10, w: 50, h: 20, rank: 0 },
    { x: 560, y: 40, w: 50, h: 20, rank: 0 },
    { x: 575, y: 70, w: 60, h: 20, rank: 0 },
  ];
  const b = wholeNodesBox(box, area, nodes);
  const whole = nodes.filter((n) => n.x >= b.x && n.x + n.w <= b.x + b.w);
  assert.ok(whole.length > 0, JSON.stringify(b));
});

test("search: after Enter unfolds to a folded name, the count goes on from that name", async () => {
  const { SearchBox } = await import("../search.js");
  const input = { value: "bn1", addEventListener() {}, classList: { toggle() {} } };
  const counter = { textContent: "", title: "" };
  const stem = { id: "stem/bn1#0", label: "BatchNorm", module: "stem.bn1", op: "NativeBatchNormBackward0" };
  let entries = [
    stem,
    { id: "module:layer1", label: "layer1.0.bn1", folded: "layer1.0.bn1" },
    { id: "module:layer2", label: "layer2.0.bn1", folded: "layer2.0.bn1" },
  ];
  const revealed = [];
  const box = new SearchBox(/** @type {any} */ (input), /** @type {any} */ (counter), {
    entries: () => entries, show: () => {}, reveal: (name) => revealed.push(name),
  });
  box.update();
  box.step(1);
  assert.equal(counter.textContent, "2/3"); // on layer1, which holds layer1.0.bn1 folded
  box.step(1); // Enter: unfold to it
  assert.deepEqual(revealed, ["layer1.0.bn1"]);
  entries = [  // Python redrew: layer1 open, its bn1 drawn, layer2 still folded
    stem,
    { id: "layer1.0/bn1#0", label: "BatchNorm", module: "layer1.0.bn1", op: "NativeBatchNormBackward0" },
    { id: "layer1.0/bn1#0", label: "layer1.0.bn1" },
    { id: "module:layer2", label: "layer2.0.bn1", folded: "layer2.0.bn1" },
  ];
  box.refresh();
  assert.equal(box.matches[box.index], "layer1.0/bn1#0"); // the name unfolded to is current
  assert.equal(counter.textContent, "2/3"); // (it read 1/3: back at the stem)
  box.step(1); // and Enter goes on to layer2's, not back through the stem
  assert.equal(box.matches[box.index], "module:layer2");
});
