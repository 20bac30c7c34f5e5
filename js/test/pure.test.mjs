// DOM-free helpers: search matching, tooltip text, legend dashes.
import assert from "node:assert/strict";
import { test } from "node:test";
import { dashArray } from "../legend.js";
import { findMatches } from "../search.js";
import { normText, shapeText, tooltipRows } from "../tooltip.js";

const entries = [
  { id: "a", label: "AddmmBackward0", module: "layer1", op: "AddmmBackward0" },
  { id: "b", label: "ReluBackward0", module: "block.act", op: "ReluBackward0" },
  { id: "c", text: "layer2 (collapsed)" },
  { id: "d", label: "weight", module: "layer1", op: "" },
];

test("findMatches: case-insensitive on label/module/op, text as fallback, in order", () => {
  assert.deepEqual(findMatches("addmm", entries), ["a"]);
  assert.deepEqual(findMatches("LAYER1", entries), ["a", "d"]);
  assert.deepEqual(findMatches("layer2", entries), ["c"]);
  assert.deepEqual(findMatches("  ", entries), []);
  assert.deepEqual(findMatches("nothing", entries), []);
});

test("the tooltip shows the norm as Python wrote it, and tooltip rows", () => {
  // Python's text wins (render.node_texts), then the label's norm line, then the raw value
  assert.equal(normText({ grad_norm: 1234.5, norm_text: "1234", label: "x\n\u2016g\u2016 1234" }), "1234");
  assert.equal(normText({ grad_norm: 1.5e-7, label: "x\n\u2016g\u2016 1.5e-07" }), "1.5e-07");
  assert.equal(normText({ grad_norm: null, norm_text: "None" }), "None");
  assert.equal(normText({ grad_norm: null, label: "w\nno grad" }), "None");
  assert.equal(normText({ grad_norm: "NaN", label: "op" }), "NaN");
  assert.equal(normText({ grad_norm: 0.5 }), "0.5");
  const { title, rows } = tooltipRows("id1", {
    label: "AddmmBackward0\n(8, 16)", op: "AddmmBackward0", module: "layer1", shape: [8, 16],
    grad_norm: 0.25, status: "ok", hooked: true, expandable: "", collapsible: "layer1",
  });
  assert.equal(title, "AddmmBackward0");
  assert.deepEqual(Object.fromEntries(rows), {
    op: "AddmmBackward0", module: "layer1", shape: "(8, 16)", "grad norm": "0.25", status: "ok",
    hooked: "yes", "double-click": "collapse this module",
  });
  const folded = Object.fromEntries(tooltipRows("m", { module: "blk", expandable: "blk" }).rows);
  assert.equal(folded["double-click"], "expand this module");
  assert.equal(tooltipRows("x", undefined).title, "x");
  const ghost = Object.fromEntries(tooltipRows("ghost:param:w", {
    label: "w\n✂ frozen", op: "Ghost", kind: "ghost", shape: [16], status: "none",
    status_text: "no gradient (frozen)", norm_text: "None",
  }).rows);
  assert.equal(ghost.shape, "(16,)");
  assert.equal(ghost.node, "parameter");
  assert.ok(!("kind" in ghost) && !("op" in ghost));
  assert.equal(ghost.status, "no gradient (frozen)");
  assert.equal(shapeText([]), "()");
});

test("legend dash values", () => {
  assert.equal(dashArray(true), "4 3");
  assert.equal(dashArray("dashed"), "4 3");
  assert.equal(dashArray("dotted"), "1 2.5");
  assert.equal(dashArray("2 2"), "2 2");
  assert.equal(dashArray(false), "");
  assert.equal(dashArray("solid"), "");
  assert.equal(dashArray(null), "");
});
