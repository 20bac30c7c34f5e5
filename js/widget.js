// @ts-check
/** anywidget front end of GraphPane: glue between the model (traits, messages) and the views. */
import { buildPane, downloadText } from "./dom.js";
import { GraphView } from "./graph_view.js";
import { importInlineModule } from "./layout_client.js";
import { renderLegend } from "./legend.js";
import { PaneGlue } from "./pane_glue.js";
import { SearchBox } from "./search.js";
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
  const glue = new PaneGlue(model, {
    status: p.status,
    searchText: () => p.search.value,
    refreshSearch: () => search?.refresh(),
    // the legend always lists the hook marker, so it never changes size under the mouse
    showLegend: () => renderLegend(p.legend, model.get("legend") ?? [], true),
    setHeight: (height) => { p.viewport.style.height = height; },
    download: downloadText,
  });
  const view = new GraphView(p.viewport, glue.viewCallbacks(),
    { timeoutMs: Number(model.get("layout_timeout") ?? 30) * 1000 });
  glue.attach(view);
  search = new SearchBox(p.search, p.count, {
    entries: () => view.searchEntries(),
    show: (matches, current, center) => view.setMatches(matches, current, center),
  });
  p.zoomIn.addEventListener("click", () => view.zoomIn());
  p.zoomOut.addEventListener("click", () => view.zoomOut());
  p.fit.addEventListener("click", () => view.fit());
  p.download.addEventListener("click", () => glue.downloadSvg());
  p.root.addEventListener("keydown", (ev) => { if (ev.key === "Escape") glue.clearHighlight(); });
  const stop = glue.start();
  return () => {
    stop();
    view.dispose();
    p.root.remove();
  };
}

export default { render };
/** For tests (node --test): the Graphviz layout module embedded in this bundle. */
export const loadLayoutModule = importInlineModule;
