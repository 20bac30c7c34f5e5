// Shared helpers for the node tests (no browser, no network).

/** Decode the XML entities Graphviz writes into <title> text. */
export function decodeXml(s) {
  return s
    .replace(/&#(\d+);/g, (_, n) => String.fromCodePoint(Number(n)))
    .replace(/&#x([0-9a-f]+);/gi, (_, n) => String.fromCodePoint(Number.parseInt(n, 16)))
    .replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&apos;/g, "'")
    .replace(/&amp;/g, "&");
}

/** Titles of the <g class="KIND"> groups in Graphviz SVG text, in document order. */
export function titles(svg, kind) {
  const re = new RegExp(`<g id="[^"]*" class="${kind}">\\s*<title>([^<]*)</title>`, "g");
  return [...svg.matchAll(re)].map((m) => decodeXml(m[1]));
}

/** A sample backward graph: two module clusters (one nested), params, statuses. */
export const SAMPLE_DOT = String.raw`digraph backward {
  graph [rankdir=BT, fontname="Helvetica"];
  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];
  subgraph "cluster_layer1" {
    label="layer1 (Linear)";
    "main1/AddmmBackward0#0" [label="AddmmBackward0\n(8, 16)", fillcolor="#c6e6c6"];
    "param:main1.weight" [label="weight\n(16, 4)", shape=ellipse, fillcolor="#dddddd"];
  }
  subgraph "cluster_block" {
    label="block";
    subgraph "cluster_block.act" {
      label="block.act (ReLU)";
      "main1/ReluBackward0#1" [label="ReluBackward0", fillcolor="#ffd0d0", style="rounded,filled,dashed"];
    }
  }
  "module:layer2" [label="layer2 (collapsed)", shape=box3d];
  "odd <id> & \"quotes\" - x" [label="odd"];
  "loss" [label="\n ()", fillcolor="#eeeeee"];
  "param:main1.weight" -> "main1/AddmmBackward0#0";
  "main1/AddmmBackward0#0" -> "main1/ReluBackward0#1";
  "main1/ReluBackward0#1" -> "module:layer2";
  "module:layer2" -> "odd <id> & \"quotes\" - x";
  "odd <id> & \"quotes\" - x" -> "loss";
}`;

export const SAMPLE_NODE_IDS = [
  "main1/AddmmBackward0#0", "param:main1.weight", "main1/ReluBackward0#1",
  "module:layer2", 'odd <id> & "quotes" - x', "loss",
];
export const SAMPLE_CLUSTERS = ["cluster_layer1", "cluster_block", "cluster_block.act"];
