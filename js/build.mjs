// Bundle the GraphPane front end into ../gradviz_widgets/static/graph_pane.js (one ES module).
// Step 1 bundles layout_worker.js (Graphviz WASM inlined) to a string; step 2 bundles
// widget.js with that string, gzipped and base64-encoded (JSON-safe, ~0.6 MB instead of
// ~3 MB once escaped into the widget's _esm trait), as the module "gvw:layout-worker-source".
// The page decompresses it and starts a Web Worker from it (or, as a fallback, imports
// it on the main thread).
// Step 3 bundles the offline watch page's script (watch_page.js) and the marimo mirror
// (marimo_mirror.js), and copies the CSS files the Python side inlines (STATIC_CSS).
// Usage: node build.mjs [--dev]   (--dev: no minification)
import { copyFile, mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const outfile = join(here, "..", "gradviz_widgets", "static", "graph_pane.js");
const minify = !process.argv.includes("--dev");
const common = { bundle: true, format: "esm", platform: "browser", target: "es2020", minify, charset: "utf8", legalComments: "inline", logLevel: "warning" };

/** the other bundles: one ES module each, in static/ under the same name */
const PAGES = ["watch_page", "marimo_mirror", "watch_live"];
/** stylesheets the Python side reads from static/ (copied unchanged) */
const STATIC_CSS = ["watch_page.css", "marimo_mirror.css", "explorer_page.css"];

const t0 = performance.now();
// a classic script, not a module: Chromium refuses module workers from blob: URLs on a page
// opened over file:// (the offline page), and a large graph then froze the tab on the main
// thread; `GvwLayout` is what the main-thread fallback reads (layout_client.js)
const worker = await esbuild.build({
  ...common, format: "iife", globalName: "GvwLayout", define: { "import.meta.url": "undefined" },
  entryPoints: [join(here, "layout_worker.js")], write: false,
});
const workerSource = worker.outputFiles[0].text;
const workerGzipB64 = gzipSync(worker.outputFiles[0].contents, { level: 9 }).toString("base64");

/** @type {import("esbuild").Plugin} */
const workerSourcePlugin = {
  name: "layout-worker-source",
  setup(build) {
    build.onResolve({ filter: /^gvw:layout-worker-source$/ }, (args) => ({ path: args.path, namespace: "gvw" }));
    build.onLoad({ filter: /.*/, namespace: "gvw" }, () => ({ contents: `export default ${JSON.stringify(workerGzipB64)};`, loader: "js" }));
  },
};

const main = await esbuild.build({ ...common, charset: "ascii", entryPoints: [join(here, "widget.js")], plugins: [workerSourcePlugin], loader: { ".css": "text" }, write: false });
await mkdir(dirname(outfile), { recursive: true });
await writeFile(outfile, main.outputFiles[0].contents);
// the standalone page's host script (gradviz_widgets/page.py inlines it next to the bundle)
await copyFile(join(here, "page_host.js"), join(dirname(outfile), "page_host.js"));
// the pane's CSS, which GraphPane passes to anywidget as `_css` (the bundle carries it too)
await copyFile(join(here, "graph_pane.css"), join(dirname(outfile), "graph_pane.css"));
// the offline watch page (watch/page.py inlines it), the marimo mirror (Mirror._esm) and the
// live watch view's sizer (watch/live.py, LiveSizer._esm)
const pages = await esbuild.build({ ...common, charset: "ascii", entryPoints: PAGES.map((name) => join(here, `${name}.js`)), outdir: dirname(outfile), write: false });
for (const file of pages.outputFiles) await writeFile(file.path, file.contents);
for (const name of STATIC_CSS) await copyFile(join(here, name), join(dirname(outfile), name));
const kb = (n) => `${(n / 1024).toFixed(0)} KiB`;
console.log(`built ${outfile} (${kb(main.outputFiles[0].contents.length)}; worker ${kb(workerSource.length)}, gzipped ${kb(workerGzipB64.length * 0.75)}) in ${(performance.now() - t0).toFixed(0)} ms`);
