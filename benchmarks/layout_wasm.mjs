// Time Graphviz layout (DOT -> SVG) with the WASM build the widget uses (@viz-js/viz).
//
//   node benchmarks/layout_wasm.mjs [--repeats N] [--budget-ms MS] FILE.dot [FILE.dot ...]
//
// Prints one JSON object on stdout:
//   {"viz_version", "graphviz_version", "module", "init_ms",
//    "results": {FILE: {"first_ms", "median_ms", "runs_ms", "svg_bytes"} | {"error"}}}
// `init_ms` is creating the instance (compiling the WASM module), done once per process, as
// the widget's layout worker does once per page. `first_ms` is the first layout on the fresh
// instance; `median_ms` the median over `runs_ms` (first included). Repeats stop early once
// the time spent on one file passes --budget-ms, so a slow graph is laid out only once.
// Labels are sanitized as in js/layout_core.js, and a failed instance is replaced.
import { existsSync, readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const candidates = [
  resolve(here, "../js/node_modules/@viz-js/viz/dist/viz.js"), // the widget's own copy
  resolve(here, "node_modules/@viz-js/viz/dist/viz.js"), // npm install --prefix benchmarks
];

function parseArgs(argv) {
  const opts = { repeats: 3, budgetMs: 5000, files: [] };
  for (let i = 0; i < argv.length; i += 1) {
    const a = argv[i];
    if (a === "--repeats") opts.repeats = Number(argv[++i]);
    else if (a === "--budget-ms") opts.budgetMs = Number(argv[++i]);
    else opts.files.push(a);
  }
  return opts;
}

// The widget's layout_core.js removes line breaks at the very start of quoted labels (they
// crash Graphviz-WASM with "table index is out of bounds"); do the same here.
const LABEL_START = /(\b(?:x|head|tail)?label\s*=\s*")((?:\\[nlr]|\s)+)/g;
function sanitizeDot(dot) {
  return dot.replace(LABEL_START, (all, head, run) => (/\\[nlr]|[\r\n]/.test(run) ? head : all));
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const path = candidates.find((p) => existsSync(p));
  if (!path) {
    process.stdout.write(JSON.stringify({
      error: "@viz-js/viz not found; run `npm ci --prefix js` or "
        + "`npm install --prefix benchmarks @viz-js/viz@3.31.0`",
    }) + "\n");
    process.exit(2);
  }
  const viz = await import(pathToFileURL(path).href);
  const t0 = performance.now();
  let instance = await viz.instance();
  const initMs = performance.now() - t0;
  const results = {};
  for (const file of opts.files) {
    const dot = sanitizeDot(readFileSync(file, "utf8"));
    const runs = [];
    let svg = "";
    try {
      let spent = 0;
      for (let r = 0; r < Math.max(1, opts.repeats); r += 1) {
        const s = performance.now();
        svg = instance.renderString(dot, { format: "svg", engine: "dot" });
        const ms = performance.now() - s;
        runs.push(ms);
        spent += ms;
        if (spent > opts.budgetMs) break;
      }
      results[file] = { first_ms: runs[0], median_ms: median(runs), runs_ms: runs, svg_bytes: svg.length };
    } catch (err) {
      results[file] = { error: err instanceof Error ? err.message : String(err), runs_ms: runs };
      instance = await viz.instance(); // never reuse an instance that failed (as the widget)
    }
  }
  const pkg = JSON.parse(readFileSync(resolve(dirname(path), "../package.json"), "utf8"));
  process.stdout.write(JSON.stringify({
    viz_version: pkg.version,
    graphviz_version: instance.graphvizVersion,
    module: path,
    init_ms: initMs,
    results,
  }) + "\n");
}

main().catch((err) => {
  process.stdout.write(JSON.stringify({ error: String(err && err.stack || err) }) + "\n");
  process.exit(1);
});
