// LayoutEngine (layout_core.js) against the real WASM Graphviz, offline.
import assert from "node:assert/strict";
import { test } from "node:test";
import { instance } from "@viz-js/viz";
import { LayoutEngine, LayoutError, sanitizeDot } from "../layout_core.js";
import { SAMPLE_CLUSTERS, SAMPLE_DOT, SAMPLE_NODE_IDS, titles } from "./helpers.mjs";

test("renders a DOT graph with clusters; node and cluster titles are the DOT ids", async () => {
  const engine = new LayoutEngine();
  const r = await engine.layout(SAMPLE_DOT);
  assert.match(r.svg, /^<\?xml[\s\S]*<svg[\s\S]*<\/svg>\s*$/);
  assert.deepEqual(new Set(titles(r.svg, "node")), new Set(SAMPLE_NODE_IDS));
  assert.deepEqual(new Set(titles(r.svg, "cluster")), new Set(SAMPLE_CLUSTERS));
  assert.equal(r.retried, false);
  assert.ok(r.ms >= 0);
});

test("sanitizeDot drops line breaks at the start of labels only", () => {
  assert.equal(sanitizeDot('a [label="\\n ()"]'), 'a [label="()"]');
  assert.equal(sanitizeDot('a [label="\\n\\n x"]'), 'a [label="x"]');
  assert.equal(sanitizeDot('a [xlabel = "\\lfoo"]'), 'a [xlabel = "foo"]');
  assert.equal(sanitizeDot('a [label="  keep\\nme"]'), 'a [label="  keep\\nme"]');
  assert.equal(sanitizeDot('a [label="x\\ny"]'), 'a [label="x\\ny"]');
  assert.equal(sanitizeDot('a [label="\nreal newline"]'), 'a [label="real newline"]');
});

test("labels that start with a newline lay out repeatedly on one engine", async () => {
  const engine = new LayoutEngine();
  for (let i = 0; i < 10; i += 1) {
    const r = await engine.layout('digraph { a [label="\\n ()"]; b [label="x"]; a -> b; c [label="\\nfoo"]; b -> c }');
    assert.deepEqual(titles(r.svg, "node"), ["a", "b", "c"]);
  }
  assert.equal(engine.instances, 1);
});

test("a crashed instance is dropped and the layout retried on a new one", async () => {
  let created = 0;
  const createInstance = async () => {
    created += 1;
    const viz = await instance();
    if (created === 1) {
      return { render() { throw new Error("RuntimeError: table index is out of bounds"); } };
    }
    return viz;
  };
  const engine = new LayoutEngine({ createInstance });
  const r = await engine.layout(SAMPLE_DOT);
  assert.equal(r.retried, true);
  assert.equal(created, 2);
  assert.deepEqual(new Set(titles(r.svg, "node")), new Set(SAMPLE_NODE_IDS));
  // the healthy instance is kept for the next layout
  const again = await engine.layout(SAMPLE_DOT);
  assert.equal(again.retried, false);
  assert.equal(created, 2);
});

test("an instance that keeps failing gives a LayoutError, and the engine recovers afterwards", async () => {
  let created = 0;
  let broken = true;
  const createInstance = async () => {
    created += 1;
    if (broken) return { render() { throw new Error("table index is out of bounds"); } };
    return instance();
  };
  const engine = new LayoutEngine({ createInstance });
  await assert.rejects(engine.layout("digraph { a -> b }"), (err) => {
    assert.ok(err instanceof LayoutError);
    assert.match(err.message, /table index is out of bounds/);
    return true;
  });
  assert.equal(created, 2);
  broken = false;
  const r = await engine.layout("digraph { a -> b }");
  assert.deepEqual(titles(r.svg, "node"), ["a", "b"]);
});

test("a DOT syntax error is reported as a LayoutError with Graphviz's message", async () => {
  const engine = new LayoutEngine();
  await assert.rejects(engine.layout("digraph { a -> "), /syntax error/);
  const r = await engine.layout("digraph { x }");
  assert.deepEqual(titles(r.svg, "node"), ["x"]);
});
