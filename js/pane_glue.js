// @ts-check
/**
 * The GraphPane's glue between the widget model (traits, messages) and the graph view, without
 * the DOM: it decides what to send, when to lay out, what the status line says and when a
 * selection is centred. js/widget.js builds the DOM and hands it in; the node tests drive it
 * with a fake model and a fake view.
 */
import { fitMeasured } from "./pan_zoom.js";
import { statusView } from "./resolve.js";

/**
 * @typedef {object} PaneParts  what the glue touches outside the view
 * @property {{textContent: string, title: string, dataset: Record<string, string>}} status
 * @property {() => string} searchText   the search box's text
 * @property {() => void} refreshSearch  re-run the search after a new layout
 * @property {() => void} showLegend
 * @property {(height: string) => void} setHeight
 * @property {(text: string, filename: string, mime: string) => void} download
 * @property {() => number} [cellWidth] width of the widget's whole output (0: unknown)
 * @property {() => void} [holdPlace] keep the graph where it is on screen for a while (the
 *   readout above it fills after a click)
 */

export class PaneGlue {
  /** @param {any} model  anywidget's model: get/set/save_changes/send/on/off
   *  @param {PaneParts} parts */
  constructor(model, parts) {
    this.model = model;
    this.parts = parts;
    /** @type {any} the GraphView (attach) */
    this.view = null;
    this.localError = "";
    this.note = "";
    this.busy = false;
    this.clickedId = ""; // the last node clicked here: its selection needs no centring
    this.revealPending = Boolean(model.get("selected"));
    /** @type {Promise<unknown>} */
    this.pending = Promise.resolve();
    this.scheduled = false;
    /** @type {[string, Function][]} */
    this.listeners = [];
    this.shownRevision = -1; // the revision now on screen (fit reports name it)
    this.cellSent = 0;
  }

  /** Whether the whole graph fitted the viewport readably: Python folds deeper if not, or
   *  gives the graph the cell's whole width (`across`: px the graph needs at readable labels).
   *  A fit measured at no real size (hidden, not laid out) is not sent: it says nothing. */
  reportFit(/** @type {{fits: boolean, width: number, height: number, across?: number}} */ fit) {
    if (!fitMeasured(fit)) return;
    this.send({ kind: "fit", revision: this.shownRevision, fits: fit.fits, width: fit.width,
      height: fit.height, cell: Math.round(this.parts.cellWidth?.() ?? 0),
      across: Math.round(fit.across ?? 0) });
  }

  /** The widget's output width (the cell), when it changed by more than a few px: Python
   *  chooses how graph and chart share it. */
  reportCell(/** @type {number} */ width) {
    const w = Math.round(width);
    if (w <= 0 || Math.abs(w - this.cellSent) < 8) return;
    this.cellSent = w;
    this.send({ kind: "resize", cell: w });
  }

  /** Without a kernel (static HTML export) syncing throws; the pane must keep working. */
  send(/** @type {object} */ msg) {
    try { this.model.send(msg); } catch { /* no kernel */ }
  }

  setTrait(/** @type {string} */ name, /** @type {unknown} */ value) {
    this.model.set(name, value);
    try { this.model.save_changes(); } catch { /* no kernel */ }
  }

  /** The callbacks GraphView is built with. */
  viewCallbacks() {
    return {
      /** @param {string} id */
      onNodeClick: (id) => {
        // Python owns the selection: the page sends the click and shows `selected` when it comes
        this.clickedId = id;
        this.parts.holdPlace?.(); // the readout above a stacked graph fills: the node stays put
        this.clearHighlight(); // a new selection ends the bar-click dimming
        this.noteIfBusy();
        this.send({ kind: "node_click", id });
      },
      /** @param {string} id */
      onNodeDblClick: (id) => {
        const info = this.view?.infoOf(id) ?? {};
        const module = info.expandable || info.collapsible;
        if (module) this.toggleScope(module);
      },
      /** @param {string} module */
      onClusterDblClick: (module) => this.toggleScope(module),
      onBackgroundClick: () => this.clearHighlight(),
      /** @param {{fits: boolean, width: number, height: number}} fit */
      onFit: (fit) => this.reportFit(fit),
      onEscape: () => this.clearHighlight(),
    };
  }

  attach(/** @type {any} */ view) { this.view = view; }

  toggleScope(/** @type {string} */ module) {
    this.noteIfBusy();
    this.send({ kind: "toggle_scope", module });
  }

  clearHighlight() {
    if ((this.model.get("highlight") ?? []).length) this.setTrait("highlight", []);
    this.view?.setHighlight([]);
  }

  /** Python handles one message at a time: a click while it runs waits in the kernel's queue.
   *  Say so, instead of looking ignored. */
  noteIfBusy() {
    if (this.model.get("status_level") !== "busy") return;
    this.note = "Queued: applies when the current run finishes\u2026";
    this.showStatus();
  }

  showStatus() {
    const m = this.model;
    const { text, level } = statusView({ localError: this.localError, busy: this.busy,
      note: this.note, text: m.get("status_text") ?? "", level: m.get("status_level") || "info" });
    const status = this.parts.status;
    status.textContent = text; // user text is data: never markup
    status.title = text; // one row high with an ellipsis; the full text on hover or a click
    status.dataset.level = level;
  }

  async doRender() {
    const m = this.model;
    const revision = m.get("revision");
    const timer = setTimeout(() => { this.busy = true; this.showStatus(); }, 300);
    let info;
    try {
      const before = this.shownRevision;
      this.shownRevision = revision; // a fit report sent while drawing names this revision
      info = await this.view.render(m.get("dot") ?? "", m.get("key_map") ?? {});
      if (!info && this.shownRevision === revision) this.shownRevision = before;
      if (info) this.localError = "";
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      this.localError = `Layout failed: ${message}`;
      this.send({ kind: "layout_error", message, revision });
    } finally {
      clearTimeout(timer);
      this.busy = false;
      this.showStatus();
    }
    if (!info) return;
    if (this.revealPending && this.view.setSelected(m.get("selected"), true)) this.revealPending = false;
    if (this.parts.searchText().trim()) this.parts.refreshSearch();
    this.setTrait("rendered", { revision, nodes: info.nodes, ms: Math.round(info.ms),
      engine: info.engine, retried: info.retried });
  }

  /** One layout per burst of trait changes (dot and revision arrive together). */
  scheduleRender() {
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => { this.scheduled = false; this.pending = this.doRender(); });
  }

  selectedChanged() {
    const id = this.model.get("selected") ?? "";
    const centre = id !== this.clickedId; // selected from the chart or Python, not a click here
    this.revealPending = !this.view.setSelected(id, centre) && centre && id !== "";
    this.clickedId = "";
  }

  downloadSvg() {
    if (this.view.svgText) this.parts.download(this.view.svgText, "gradviz-graph.svg", "image/svg+xml");
    else { this.localError = "Nothing laid out yet to download"; this.showStatus(); }
  }

  /** Messages from Python: downloads, and SVG requests answered after the pending layout. */
  async onMessage(/** @type {any} */ msg) {
    if (!msg) return;
    if (msg.kind === "download") {
      this.parts.download(String(msg.text ?? ""), String(msg.filename || "download.txt"),
        String(msg.mime || "text/plain"));
      return;
    }
    if (msg.kind !== "request_svg" && msg.kind !== "download_svg") return;
    await this.pending.catch(() => {});
    if (msg.kind === "download_svg") this.downloadSvg();
    else this.send({ kind: "svg", request: msg.request, svg: this.view.svgText });
  }

  /** Listen to the model, show the current state and lay out; returns the cleanup. */
  start() {
    const m = this.model;
    const timeoutMs = () => Number(m.get("layout_timeout") ?? 30) * 1000;
    const newStatus = () => { this.localError = ""; this.note = ""; this.showStatus(); };
    /** @type {[string, Function][]} */
    const handlers = [
      ["change:dot", () => this.scheduleRender()],
      ["change:revision", () => this.scheduleRender()],
      ["change:nodes", () => { this.view.setNodeInfo(m.get("nodes") ?? {}); this.parts.showLegend(); }],
      ["change:clusters", () => this.view.setClusterInfo?.(m.get("clusters") ?? {})],
      ["change:legend", () => this.parts.showLegend()],
      ["change:status_text", newStatus],
      ["change:status_level", newStatus],
      ["change:highlight", () => this.view.setHighlight(m.get("highlight") ?? [])],
      ["change:layout_timeout", () => { this.view.layout.timeoutMs = timeoutMs(); }],
      ["change:height", () => this.parts.setHeight(m.get("height") || "")],
      ["change:selected", () => this.selectedChanged()],
      ["msg:custom", (/** @type {any} */ msg) => this.onMessage(msg)],
    ];
    for (const [ev, fn] of handlers) { m.on(ev, fn); this.listeners.push([ev, fn]); }
    this.view.layout.timeoutMs = timeoutMs();
    this.parts.setHeight(m.get("height") || "");
    this.view.setNodeInfo(m.get("nodes") ?? {});
    this.view.setClusterInfo?.(m.get("clusters") ?? {});
    this.view.setHighlight(m.get("highlight") ?? []);
    this.parts.showLegend();
    this.showStatus();
    this.scheduleRender();
    return () => { for (const [ev, fn] of this.listeners) m.off(ev, fn); this.listeners = []; };
  }
}
