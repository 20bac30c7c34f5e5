// The pane's CSS reaches both hosts: anywidget gets the copied file as GraphPane._css, the
// standalone page gets the text inside the bundle. Python owns the selection: the page never
// writes the `selected` trait.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const read = (/** @type {string} */ rel) => readFileSync(fileURLToPath(new URL(rel, import.meta.url)), "utf8");

test("the build copies graph_pane.css next to the bundle, unchanged", () => {
  assert.equal(read("../../gradviz_widgets/static/graph_pane.css"), read("../graph_pane.css"));
});

test("the bundle carries the CSS for hosts without anywidget", () => {
  const bundle = read("../../gradviz_widgets/static/graph_pane.js");
  for (const rule of [".gvw-pane g.node.gvw-selected", ".gvw-status[data-level=", ".gvw-pane g.node.hooked"]) {
    assert.ok(bundle.includes(rule), rule);
  }
});

test("the page sends clicks and never writes the selection", () => {
  assert.doesNotMatch(read("../widget.js"), /setTrait\(\s*["']selected["']/);
});
