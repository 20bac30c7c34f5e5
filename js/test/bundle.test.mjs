// The built bundle (gradviz_widgets/static/graph_pane.js): an anywidget ES module whose
// embedded Graphviz lays out offline. Build it first: `node build.mjs`.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { SAMPLE_CLUSTERS, SAMPLE_DOT, SAMPLE_NODE_IDS, titles } from "./helpers.mjs";

const bundle = fileURLToPath(new URL("../../gradviz_widgets/static/graph_pane.js", import.meta.url));

test("the bundle exists, is one self-contained ES module and exports render", async () => {
  assert.ok(existsSync(bundle), `missing ${bundle}: run "node build.mjs" in js/`);
  const text = readFileSync(bundle, "utf8");
  assert.doesNotMatch(text, /\bimport\s*[^(]*\bfrom\s*["']/, "bundle must not import other modules");
  assert.doesNotMatch(text, /https?:\/\/(?!www\.w3\.org|www\.graphviz\.org|graphviz\.org|libexpat)/i);
  const mod = await import(bundle);
  assert.equal(typeof mod.default.render, "function");
});

test("the bundle's embedded Graphviz renders the sample graph with ids as titles", async () => {
  const mod = await import(bundle);
  const layout = await mod.loadLayoutModule();
  const engine = new layout.LayoutEngine();
  const r = await engine.layout(SAMPLE_DOT);
  assert.deepEqual(new Set(titles(r.svg, "node")), new Set(SAMPLE_NODE_IDS));
  assert.deepEqual(new Set(titles(r.svg, "cluster")), new Set(SAMPLE_CLUSTERS));
});
