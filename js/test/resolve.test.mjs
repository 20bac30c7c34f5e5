// Keys -> Python ids, accessible names, the status line, legend dashes; and a DOT written the
// way render.py writes it (generated keys, sanitised labels) through the real WASM Graphviz.
import assert from "node:assert/strict";
import { test } from "node:test";
import { LayoutEngine } from "../layout_core.js";
import { dashArray, isBold } from "../legend.js";
import { clusterModuleFor, nodeAriaLabel, nodeIdFor, own, statusView } from "../resolve.js";
import { tooltipRows } from "../tooltip.js";
import { decodeXml } from "./helpers.mjs";

const MARKUP = "<img src=x onerror=alert(1)>";
// a fake `key_map` trait, as GraphPane sends it next to the DOT
const KEYS = {
  n0: `${MARKUP}/AddmmBackward0#0`, n1: "param:new\nline.weight", n2: "module:at@1",
  n3: "nul\u0000x/TanhBackward0#0", n4: "param:&amp;lt;.bias", c0: MARKUP, c1: "cr\rret",
  c2: "__proto__",
};

test("node and cluster elements resolve through the key map, whatever the names", () => {
  for (const [key, id] of Object.entries(KEYS)) {
    if (key.startsWith("n")) assert.equal(nodeIdFor(key, key, KEYS), id);
  }
  assert.equal(nodeIdFor("n9", "n9", KEYS), null); // not ours: ignored, not guessed
  assert.equal(nodeIdFor("toString", "", KEYS), null); // no prototype lookups
  assert.equal(clusterModuleFor("cluster_c0", "c0", KEYS), MARKUP);
  assert.equal(clusterModuleFor("cluster_c1", "", KEYS), "cr\rret"); // from the title alone
  assert.equal(clusterModuleFor("cluster_c2", "c2", KEYS), "__proto__");
  assert.equal(clusterModuleFor("cluster_c7", "c7", KEYS), null);
  // a hand-written DOT (no key map): titles are the ids, as before
  assert.equal(nodeIdFor("param:w", "node3", {}), "param:w");
  assert.equal(clusterModuleFor("cluster_layer1", "clust1", undefined), "layer1");
  assert.equal(own({ a: 1 }, "a"), true);
  assert.equal(own({}, "constructor"), false);
});

test("accessible names say label, status in Python's words, module, hook state", () => {
  // status_text: the words Python sends (render.node_texts, from vocabulary.STYLES)
  assert.equal(nodeAriaLabel("x", { label: "AddmmBackward0\n‖g‖ 1", status: "nonfinite", status_text: "NaN or Inf gradient", module: "m", hooked: true }),
    "AddmmBackward0, NaN or Inf gradient, module m, hooked");
  assert.equal(nodeAriaLabel("a", { status: "zero", status_text: "all zeros" }), "a, all zeros");
  // hand-written info without words: the status name, still told apart
  assert.equal(nodeAriaLabel("x", { label: "a", status: "exploding" }), "a, exploding");
  assert.equal(nodeAriaLabel("id-only", undefined), "id-only");
  assert.notEqual(nodeAriaLabel("a", { status: "exploding" }), nodeAriaLabel("a", { status: "nonfinite" }));
});

test("status line: local error, then layout busy, then a queued-click note, then Python", () => {
  const base = { localError: "", busy: false, note: "", text: "3 findings", level: "warning" };
  assert.deepEqual(statusView(base), { text: "3 findings", level: "warning" });
  assert.deepEqual(statusView({ ...base, note: "Queued" }), { text: "Queued", level: "busy" });
  assert.equal(statusView({ ...base, busy: true, note: "Queued" }).level, "busy");
  assert.deepEqual(statusView({ ...base, busy: true, localError: "Layout failed" }),
    { text: "Layout failed", level: "error" });
  assert.deepEqual(statusView({ ...base, text: "", level: "" }), { text: "", level: "info" });
});

test("legend: exploding (bold) and NaN/Inf (bold, dashed) differ without colour", () => {
  assert.equal(dashArray("bold"), "");
  assert.equal(dashArray("bold,dashed"), "4 3");
  assert.equal(dashArray("filled,dotted"), "1 2.5");
  assert.ok(isBold("bold") && isBold("bold,dashed") && !isBold("dashed") && !isBold(true));
});

test("a DOT with generated keys and sanitised hostile labels lays out; titles are the keys", async () => {
  const dot = String.raw`digraph gradgraph {
  subgraph cluster_c0 {
    id="c0"; label="<img src=x onerror=alert(1)> · Linear"; style="rounded,dashed";
    n0 [id="n0", label="AddmmBackward0\n‖g‖ 0.1"];
    n1 [id="n1", label="new␊line.weight\n(3, 3)"];
  }
  subgraph cluster_c1 { id="c1"; label="cr␍ret · Linear"; n3 [id="n3", label="nul␀x esc␛x vt␋x [U+202E] \\N \"q\" &amp;amp;lt;"]; }
  n2 [id="n2", label="at@1\nLinear · 6 nodes", shape="box3d"];
  n4 [id="n4", label="&amp;amp;lt;.bias\n(3,)", style="filled,bold,dashed"];
  n1 -> n0; n0 -> n3; n3 -> n2; n4 -> n2;
}`;
  const engine = new LayoutEngine();
  for (let i = 0; i < 3; i += 1) { // the same instance keeps working
    const { svg } = await engine.layout(dot);
    const groups = [...svg.matchAll(/<g id="([^"]*)" class="(node|cluster)">\s*<title>([^<]*)<\/title>/g)];
    const nodes = groups.filter((m) => m[2] === "node");
    assert.deepEqual(nodes.map((m) => m[1]).sort(), ["n0", "n1", "n2", "n3", "n4"]);
    for (const m of nodes) assert.equal(nodeIdFor(decodeXml(m[3]), m[1], KEYS), KEYS[/** @type {"n0"} */ (m[1])]);
    const clusters = groups.filter((m) => m[2] === "cluster");
    assert.deepEqual(clusters.map((m) => clusterModuleFor(decodeXml(m[3]), m[1], KEYS)).sort(), ["cr\rret", MARKUP].sort());
    const texts = [...svg.matchAll(/<text[^>]*>([^<]*)<\/text>/g)].map((m) => decodeXml(m[1]));
    assert.ok(texts.includes("&amp;lt;.bias"), texts.join(" | "));
    assert.ok(texts.some((t) => t.startsWith("<img src=x")), "markup in a label is text");
    assert.doesNotMatch(svg, /<img/);
  }
  assert.equal(engine.instances, 1);
});

test("a hooked node's name and tooltip name the hooks Python sends, else just 'hooked'", () => {
  const info = { label: "layer2 · Sequential", module: "layer2", hooked: true, hooked_text: "hooked: backward at layer2.0" };
  assert.equal(nodeAriaLabel("m", info), "layer2 · Sequential, module layer2, hooked: backward at layer2.0");
  assert.equal(nodeAriaLabel("m", { ...info, hooked_text: "" }), "layer2 · Sequential, module layer2, hooked");
});

test("the tooltip's hooked row names the hooks, else says yes", () => {
  const row = (info) => tooltipRows("m", info).rows.find(([k]) => k === "hooked")?.[1];
  assert.equal(row({ hooked: true, hooked_text: "hooked: backward at layer2.0" }), "backward at layer2.0");
  assert.equal(row({ hooked: true }), "yes");
  assert.equal(row({ hooked: false, hooked_text: "" }), undefined);
});
