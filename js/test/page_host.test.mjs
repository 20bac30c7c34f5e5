import assert from "node:assert/strict";
import { test } from "node:test";
import { nextView } from "../page_host.js";

/** A view at `depth` whose nodes fold the modules in `folded`. */
const view = (depth, folded) => ({
  label: depth === null ? "full" : `depth ${depth}`,
  depth,
  dot: "",
  key_map: {},
  nodes: Object.fromEntries(folded.map((m) => [`module:${m}`, { expandable: m }])),
});

// the page's order: the overview first (here: nothing folds, so "full"), then depth 0, 1, ...
const views = [view(null, []), view(0, ["main1", "blocks"]), view(1, ["blocks.0", "blocks.1"])];

test("a folded module unfolds into the most folded view that draws it open", () => {
  assert.equal(nextView(views, 1, "main1"), 2); // depth 0 -> depth 1, not back to "full"
  assert.equal(nextView(views, 2, "blocks.0"), 0); // depth 1 -> full
});

test("an open module folds into the least folded view that folds it", () => {
  assert.equal(nextView(views, 0, "main1"), 1); // full -> depth 0
  assert.equal(nextView(views, 0, "blocks.1"), 2); // full -> depth 1, not depth 0
  assert.equal(nextView(views, 2, "blocks"), 1);
});

test("a module no view folds stays where it is", () => {
  assert.equal(nextView(views, 0, "loss"), 0);
});

test("a module named like a missing field is not taken for one inside it", () => {
  const named = [view(null, []), { ...view(0, []), nodes: { x: {} } }];
  assert.equal(nextView(named, 0, "undefined.x"), 0);
});
