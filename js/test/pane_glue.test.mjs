// The GraphPane glue (js/pane_glue.js) against a fake widget model and a fake graph view.
import assert from "node:assert/strict";
import { test } from "node:test";
import { PaneGlue } from "../pane_glue.js";

class FakeModel {
  constructor(traits = {}) {
    this.traits = { dot: "", key_map: {}, revision: 0, selected: "", highlight: [], nodes: {},
      legend: [], status_text: "", status_level: "info", layout_timeout: 30, height: "", ...traits };
    this.sent = [];
    this.handlers = new Map();
    this.saves = 0;
  }
  get(name) { return this.traits[name]; }
  set(name, value) { this.traits[name] = value; }
  save_changes() { this.saves += 1; }
  send(msg) { this.sent.push(msg); }
  on(ev, fn) { this.handlers.set(ev, [...(this.handlers.get(ev) ?? []), fn]); }
  off(ev, fn) { this.handlers.set(ev, (this.handlers.get(ev) ?? []).filter((f) => f !== fn)); }
  /** Python changes a trait: its change handlers run, like anywidget's. */
  change(name, value) { this.traits[name] = value; for (const fn of this.handlers.get(`change:${name}`) ?? []) fn(); }
  message(msg) { return Promise.all((this.handlers.get("msg:custom") ?? []).map((fn) => fn(msg))); }
}

class FakeView {
  constructor({ fail = "" } = {}) {
    this.fail = fail;
    this.layout = { timeoutMs: 0 };
    this.renders = [];
    this.selected = [];
    this.highlight = null;
    this.svgText = "";
    this.info = { n1: { expandable: "" }, m: { expandable: "block" } };
  }
  async render(dot, keys) {
    this.renders.push({ dot, keys });
    if (this.fail) throw new Error(this.fail);
    this.svgText = `<svg>${dot}</svg>`;
    return { nodes: 3, ms: 12.4, engine: "fake", retried: false };
  }
  setSelected(id, centre) { this.selected.push([id, centre]); return id !== "missing"; }
  setHighlight(ids) { this.highlight = ids; }
  setNodeInfo(nodes) { this.nodes = nodes; }
  setClusterInfo(clusters) { this.clusters = clusters; }
  infoOf(id) { return this.info[id]; }
}

function setUp(traits = {}, viewOptions = {}) {
  const model = new FakeModel(traits);
  const status = { textContent: "", title: "", dataset: {} };
  const downloads = [];
  const glue = new PaneGlue(model, {
    status, searchText: () => "", refreshSearch: () => {}, showLegend: () => {},
    setHeight: (h) => { status.height = h; }, download: (...a) => downloads.push(a),
  });
  const view = new FakeView(viewOptions);
  glue.attach(view);
  const stop = glue.start();
  return { model, status, view, glue, stop, downloads };
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

test("a new DOT is laid out once per burst and reported back with its revision", async () => {
  const { model, view, glue } = setUp({ dot: "digraph { a }", revision: 1 });
  await settle(); await glue.pending;
  assert.equal(view.renders.length, 1);
  model.change("dot", "digraph { b }");
  model.change("revision", 2); // dot and revision arrive together: one layout
  await settle(); await glue.pending;
  assert.equal(view.renders.length, 2);
  assert.deepEqual(model.get("rendered"), { revision: 2, nodes: 3, ms: 12, engine: "fake", retried: false });
});

test("the frames' hook markers reach the view at start and when Python changes them", () => {
  const hooked = { layer2: { hooked: true, hooked_text: "hooked: backward at layer2" } };
  const { model, view } = setUp({ clusters: hooked });
  assert.deepEqual(view.clusters, hooked);
  model.change("clusters", {});
  assert.deepEqual(view.clusters, {});
});

test("a click sends the node and leaves the selection to Python; Python's selection is not centred", async () => {
  const { model, view, glue } = setUp({ highlight: ["x"] });
  glue.viewCallbacks().onNodeClick("n1");
  assert.deepEqual(model.sent, [{ kind: "node_click", id: "n1" }]);
  assert.deepEqual(model.get("highlight"), []); // the click ended the dimming
  assert.equal(model.get("selected"), ""); // the page never writes the selection
  model.change("selected", "n1");
  assert.deepEqual(view.selected.at(-1), ["n1", false]); // clicked here: no jump
  model.change("selected", "n2");
  assert.deepEqual(view.selected.at(-1), ["n2", true]); // from the chart or Python: centred
});

test("a click holds the graph in place while the readout above it fills", () => {
  const model = new FakeModel();
  const held = [];
  const glue = new PaneGlue(model, {
    status: { textContent: "", title: "", dataset: {} }, searchText: () => "", refreshSearch: () => {},
    showLegend: () => {}, setHeight: () => {}, download: () => {}, holdPlace: () => held.push(1),
  });
  glue.attach(new FakeView());
  glue.viewCallbacks().onNodeClick("n1");
  assert.equal(held.length, 1);
});

test("a click while Python runs says it is queued; double-click folds the node's module", () => {
  const { model, status, glue } = setUp({ status_level: "busy", status_text: "Running\u2026" });
  glue.viewCallbacks().onNodeDblClick("m");
  assert.deepEqual(model.sent, [{ kind: "toggle_scope", module: "block" }]);
  assert.match(status.textContent, /^Queued/);
  glue.viewCallbacks().onNodeDblClick("n1"); // nothing to fold: nothing sent
  assert.equal(model.sent.length, 1);
  model.change("status_text", "done"); // Python's new status replaces the note
  assert.equal(status.textContent, "done");
});

test("a layout failure shows in the status line and is reported to Python", async () => {
  const { model, status, glue } = setUp({ dot: "digraph {", revision: 7 }, { fail: "syntax error" });
  await settle(); await glue.pending;
  assert.equal(status.textContent, "Layout failed: syntax error");
  assert.equal(status.dataset.level, "error");
  assert.deepEqual(model.sent, [{ kind: "layout_error", message: "syntax error", revision: 7 }]);
});

test("status text stays text, and SVG requests are answered after the pending layout", async () => {
  const { model, status, glue } = setUp({ dot: "digraph { a }", status_text: "<b>x</b> & y" });
  assert.equal(status.textContent, "<b>x</b> & y");
  assert.equal(status.title, "<b>x</b> & y");
  await model.message({ kind: "request_svg", request: 4 });
  await glue.pending;
  assert.deepEqual(model.sent.at(-1), { kind: "svg", request: 4, svg: "<svg>digraph { a }</svg>" });
});

test("downloads, height and the cleanup", async () => {
  const { model, status, downloads, stop } = setUp({ height: "400px" });
  assert.equal(status.height, "400px");
  await model.message({ kind: "download", text: "a,b", filename: "n.csv", mime: "text/csv" });
  assert.deepEqual(downloads, [["a,b", "n.csv", "text/csv"]]);
  stop();
  assert.ok([...model.handlers.values()].every((fns) => fns.length === 0));
});

test("a fit measured in a pane with no real size (hidden, detached, not laid out) is not sent", () => {
  const { model, glue } = setUp({ revision: 4 });
  glue.shownRevision = 4;
  for (const [width, height] of [[0, 0], [893, 0], [0, 520], [20, 520]]) {
    glue.reportFit({ fits: true, width, height });
    glue.reportFit({ fits: false, width, height });
  }
  assert.deepEqual(model.sent.filter((m) => m.kind === "fit"), []);
  glue.reportFit({ fits: false, width: 893, height: 520 });
  assert.deepEqual(model.sent.filter((m) => m.kind === "fit"),
    [{ kind: "fit", revision: 4, fits: false, width: 893, height: 520, cell: 0, across: 0 }]);
});

test("a fit report says how wide the whole graph is at readable labels", () => {
  const { model, glue } = setUp({ revision: 2 });
  glue.shownRevision = 2;
  glue.reportFit({ fits: false, width: 665, height: 522, across: 805.4 });
  assert.equal(model.sent.filter((m) => m.kind === "fit")[0].across, 805);
});

test("closestAcross: the explorer's cell is found through the shadow roots marimo draws in", async () => {
  const { closestAcross } = await import("../dom.js");
  const cell = { closest: (s) => (s === ".gv-explorer" ? cell : null), getRootNode: () => ({}) };
  const host = { closest: () => null, getRootNode: () => ({ host: cell }) };
  const el = { closest: () => null, getRootNode: () => ({ host }) };
  assert.equal(closestAcross(el, ".gv-explorer"), cell);
  const alone = { closest: () => null, getRootNode: () => ({}) };
  assert.equal(closestAcross(alone, ".gv-explorer"), null);
});
