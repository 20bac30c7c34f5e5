import assert from "node:assert/strict";
import { test } from "node:test";
import { nextView, selectionIn, viewStatus } from "../page_host.js";

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

test("selectionIn: a selected node folded away by the new view is said to be folded, not kept", () => {
  const open = { label: "full", depth: null, dot: "", key_map: {},
    nodes: { "a/ReluBackward0#0": { label: "ReluBackward0", status: "healthy", module: "a" } } };
  const folded = { label: "depth 0", depth: 0, dot: "", key_map: {}, nodes: { "module:a": { label: "a" } } };
  assert.deepEqual(selectionIn("", folded), { selected: "", text: null });
  const kept = selectionIn("a/ReluBackward0#0", open);
  assert.equal(kept.selected, "a/ReluBackward0#0");
  assert.match(kept.text ?? "", /status: healthy/);
  const gone = selectionIn("a/ReluBackward0#0", folded);
  assert.equal(gone.selected, "");
  assert.match(gone.text ?? "", /not drawn at this fold level/);
});

test("viewStatus: the pane's status line says what the view draws, not the loss line again", () => {
  const v = view(0, ["main1", "blocks"]);
  assert.equal(viewStatus(v), "depth 0: 2 nodes drawn; click one to see it under Selected");
  assert.equal(viewStatus(view(null, ["a"])), "full: 1 node drawn; click one to see it under Selected");
  assert.ok(!/loss/.test(viewStatus(v)));
  // node info also covers nodes the DOT leaves out (AccumulateGrad): the count is the drawn one
  assert.equal(viewStatus({ ...v, drawn: 1 }), "depth 0: 1 node drawn; click one to see it under Selected");
});

test("fallbackView: a view that could not be laid out gives way to the next deeper one", async () => {
  const { fallbackView } = await import("../page_host.js");
  const v = (depth) => ({ label: depth === null ? "full" : `depth ${depth}`, depth, dot: "", key_map: {}, nodes: {} });
  const views = [v(1), v(0), v(2), v(null)]; // the auto view first, then by depth, full last
  assert.equal(fallbackView(views, 1, new Set([1])), 0); // depth 0 failed: depth 1
  assert.equal(fallbackView(views, 0, new Set([1, 0])), 2);
  assert.equal(fallbackView(views, 2, new Set([1, 0, 2])), 3); // then the full graph
  assert.equal(fallbackView(views, 3, new Set([1, 0, 2, 3])), -1); // nothing deeper
});
