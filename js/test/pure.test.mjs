// DOM-free helpers: search matching, tooltip text, legend dashes.
import assert from "node:assert/strict";
import { test } from "node:test";
import { dashArray } from "../legend.js";
import { findMatches } from "../search.js";
import { formatNorm, tooltipRows } from "../tooltip.js";

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

test("formatNorm and tooltip rows", () => {
  assert.equal(formatNorm(null), "\u2014");
  assert.equal(formatNorm(0), "0");
  assert.equal(formatNorm(0.5), "0.5");
  assert.equal(formatNorm(1.234567), "1.235");
  assert.equal(formatNorm(1.5e-7), "1.50e-7");
  assert.equal(formatNorm(Number.POSITIVE_INFINITY), "Infinity");
  const { title, rows } = tooltipRows("id1", {
    label: "AddmmBackward0\n(8, 16)", op: "AddmmBackward0", module: "layer1", shape: [8, 16],
    grad_norm: 0.25, status: "ok", hooked: true, expandable: "", collapsible: "layer1",
  });
  assert.equal(title, "AddmmBackward0");
  assert.deepEqual(Object.fromEntries(rows), {
    op: "AddmmBackward0", module: "layer1", shape: "(8, 16)", "grad norm": "0.25", status: "ok",
    hooked: "yes", "double-click": "collapse layer1",
  });
  assert.equal(tooltipRows("x", undefined).title, "x");
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
