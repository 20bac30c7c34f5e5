// @ts-check
/** anywidget front end of GraphPane: glue between the model (traits, messages) and the views. */
import { buildPane, closestAcross, downloadText, holdPlace } from "./dom.js";
import { GraphView } from "./graph_view.js";
import { importInlineModule } from "./layout_client.js";
import { renderLegend } from "./legend.js";
import { PaneGlue } from "./pane_glue.js";
import { indexEntries, SearchBox } from "./search.js";
import { injectStyles } from "./styles.js";

/** @param {{model: any, el: HTMLElement}} ctx */
function render({ model, el }) {
  const p = buildPane();
  // anywidget injects GraphPane's `_css` (graph_pane.css); a host without it (the standalone
  // page) gets the same CSS from the bundle
  if (!model.get("_css")) injectStyles(p.root);
  el.appendChild(p.root);
  /** @type {SearchBox | null} */
  let search = null;
  // the explorer's whole output (the cell): the pane tells Python its width, so graph and
  // chart share it (a pane shown alone or in a page reports none). marimo draws each
  // anywidget in a shadow root of its own, inside the explorer's row: looked for across them
  const cell = () => closestAcross(el, ".gv-explorer");
  const glue = new PaneGlue(model, {
    status: p.status,
    searchText: () => p.search.value,
    refreshSearch: () => search?.refresh(),
    // the legend always lists the hook marker and the parameter stripe, so it never changes
    // size under the mouse
    showLegend: () => renderLegend(p.legend, model.get("legend") ?? [], true),
    setHeight: (height) => view.setBaseHeight(height),
    download: downloadText,
    cellWidth: () => cell()?.getBoundingClientRect().width ?? 0,
    holdPlace: () => holdPlace(p.viewport),
  });
  const view = new GraphView(p.viewport, glue.viewCallbacks(),
    { timeoutMs: Number(model.get("layout_timeout") ?? 30) * 1000 });
  glue.attach(view);
  search = new SearchBox(p.search, p.count, {
    entries: () => [...view.searchEntries(), ...indexEntries(model.get("search_index"))],
    reveal: (name) => glue.send({ kind: "reveal", name }),
    show: (matches, current, center) => view.setMatches(matches, current, center),
  });
  p.zoomIn.addEventListener("click", () => view.zoomIn());
  p.zoomOut.addEventListener("click", () => view.zoomOut());
  p.fit.addEventListener("click", () => view.fit());
  p.download.addEventListener("click", () => glue.downloadSvg());
  p.root.addEventListener("keydown", (ev) => { if (ev.key === "Escape") glue.clearHighlight(); });
  const stop = glue.start();
  /** @type {Element | null} */
  let watched = null;
  const cells = typeof ResizeObserver === "function"
    ? new ResizeObserver(() => {
      const c = cell();
      if (c && c !== watched) { cells?.observe(c); watched = c; } // attached: watch the cell
      if (c) glue.reportCell(c.getBoundingClientRect().width);
    })
    : null;
  cells?.observe(el);
  return () => {
    cells?.disconnect();
    stop();
    view.dispose();
    p.root.remove();
  };
}

export default { render };
/** For tests (node --test): the Graphviz layout module embedded in this bundle. */
export const loadLayoutModule = importInlineModule;
