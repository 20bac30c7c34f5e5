// @ts-check
/** anywidget front end of GraphPane: glue between the model (traits, messages) and the views. */
import { buildPane, downloadText } from "./dom.js";
import { GraphView } from "./graph_view.js";
import { importInlineModule } from "./layout_client.js";
import { renderLegend } from "./legend.js";
import { statusView } from "./resolve.js";
import { SearchBox } from "./search.js";
import { injectStyles } from "./styles.js";

/** @param {{model: any, el: HTMLElement}} ctx */
function render({ model, el }) {
  const p = buildPane();
  // anywidget injects GraphPane's `_css` (graph_pane.css); a host without it (the standalone
  // page) gets the same CSS from the bundle
  if (!model.get("_css")) injectStyles(p.root);
  el.appendChild(p.root);
  /** @type {[string, Function][]} */
  const listeners = [];
  const on = (/** @type {string} */ ev, /** @type {Function} */ fn) => { model.on(ev, fn); listeners.push([ev, fn]); };
  let localError = "";
  let note = "";
  let busy = false;
  let clickedId = ""; // the last node clicked here: its selection needs no centring
  let revealPending = Boolean(model.get("selected"));
  /** @type {Promise<unknown>} */
  let pending = Promise.resolve();
  // Without a kernel (static HTML export) syncing throws; the pane must keep working.
  const send = (/** @type {object} */ msg) => { try { model.send(msg); } catch { /* no kernel */ } };
  const setTrait = (/** @type {string} */ name, /** @type {unknown} */ value) => {
    model.set(name, value);
    try { model.save_changes(); } catch { /* no kernel */ }
  };

  const clearHighlight = () => {
    if ((model.get("highlight") ?? []).length) setTrait("highlight", []);
    view.setHighlight([]);
  };
  // Python handles one message at a time: a click while it runs waits in the kernel's queue.
  // Say so, instead of looking ignored.
  const noteIfBusy = () => {
    if (model.get("status_level") !== "busy") return;
    note = "Queued: applies when the current run finishes\u2026";
    showStatus();
  };
  const view = new GraphView(p.viewport, {
    onNodeClick(id) {
      // Python owns the selection: the page sends the click and shows `selected` when it comes
      clickedId = id;
      clearHighlight(); // a new selection ends the bar-click dimming
      noteIfBusy();
      send({ kind: "node_click", id });
    },
    onNodeDblClick(id) {
      const info = view.infoOf(id) ?? {};
      const module = info.expandable || info.collapsible;
      if (module) { noteIfBusy(); send({ kind: "toggle_scope", module }); }
    },
    onClusterDblClick(module) { noteIfBusy(); send({ kind: "toggle_scope", module }); },
    onBackgroundClick: clearHighlight,
    onEscape: clearHighlight,
  }, { timeoutMs: Number(model.get("layout_timeout") ?? 30) * 1000 });
  const search = new SearchBox(p.search, p.count, {
    entries: () => view.searchEntries(),
    show: (matches, current, center) => view.setMatches(matches, current, center),
  });

  const showStatus = () => {
    const { text, level } = statusView({ localError, busy, note, text: model.get("status_text") ?? "",
      level: model.get("status_level") || "info" });
    p.status.textContent = text; // user text is data: never markup
    p.status.title = text; // the line is one row high with an ellipsis; the full text on hover
    p.status.dataset.level = level;
  };
  // the legend always lists the hook marker, so it never changes size under the mouse
  const showLegend = () => renderLegend(p.legend, model.get("legend") ?? [], true);

  const doRender = async () => {
    const revision = model.get("revision");
    const keys = model.get("key_map") ?? {}; // the key map that came with this DOT
    const timer = setTimeout(() => { busy = true; showStatus(); }, 300);
    let info;
    try {
      info = await view.render(model.get("dot") ?? "", keys);
      if (info) localError = "";
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      localError = `Layout failed: ${message}`;
      send({ kind: "layout_error", message, revision });
    } finally {
      clearTimeout(timer);
      busy = false;
      showStatus();
    }
    if (!info) return;
    if (revealPending && view.setSelected(model.get("selected"), true)) revealPending = false;
    if (p.search.value.trim()) search.refresh();
    setTrait("rendered", { revision, nodes: info.nodes, ms: Math.round(info.ms), engine: info.engine, retried: info.retried });
  };
  let scheduled = false;
  const scheduleRender = () => {
    if (scheduled) return;
    scheduled = true;
    queueMicrotask(() => { scheduled = false; pending = doRender(); });
  };

  on("change:dot", scheduleRender);
  on("change:revision", scheduleRender);
  on("change:nodes", () => { view.setNodeInfo(model.get("nodes") ?? {}); showLegend(); });
  on("change:legend", showLegend);
  on("change:status_text", () => { localError = ""; note = ""; showStatus(); });
  on("change:status_level", () => { localError = ""; note = ""; showStatus(); });
  on("change:highlight", () => view.setHighlight(model.get("highlight") ?? []));
  on("change:layout_timeout", () => { view.layout.timeoutMs = Number(model.get("layout_timeout") ?? 30) * 1000; });
  on("change:height", () => { p.viewport.style.height = model.get("height") || ""; });
  on("change:selected", () => {
    const id = model.get("selected") ?? "";
    const centre = id !== clickedId; // selected from the chart or Python, not by a click here
    revealPending = !view.setSelected(id, centre) && centre && id !== "";
    clickedId = "";
  });
  const downloadSvg = () => {
    if (view.svgText) downloadText(view.svgText, "gradviz-graph.svg", "image/svg+xml");
    else { localError = "Nothing laid out yet to download"; showStatus(); }
  };
  on("msg:custom", async (/** @type {any} */ msg) => {
    if (!msg) return;
    if (msg.kind === "download") {
      downloadText(String(msg.text ?? ""), String(msg.filename || "download.txt"), String(msg.mime || "text/plain"));
      return;
    }
    if (msg.kind !== "request_svg" && msg.kind !== "download_svg") return;
    await pending.catch(() => {});
    if (msg.kind === "download_svg") downloadSvg();
    else send({ kind: "svg", request: msg.request, svg: view.svgText });
  });

  p.zoomIn.addEventListener("click", () => view.zoomIn());
  p.zoomOut.addEventListener("click", () => view.zoomOut());
  p.fit.addEventListener("click", () => view.fit());
  p.download.addEventListener("click", downloadSvg);
  p.root.addEventListener("keydown", (ev) => { if (ev.key === "Escape") clearHighlight(); });

  p.viewport.style.height = model.get("height") || "";
  view.setNodeInfo(model.get("nodes") ?? {});
  view.setHighlight(model.get("highlight") ?? []);
  showLegend();
  showStatus();
  scheduleRender();

  return () => {
    for (const [ev, fn] of listeners) model.off(ev, fn);
    view.dispose();
    p.root.remove();
  };
}

export default { render };
/** For tests (node --test): the Graphviz layout module embedded in this bundle. */
export const loadLayoutModule = importInlineModule;
