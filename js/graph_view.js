// @ts-check
/** The graph itself: DOT -> SVG (Graphviz in a worker), nodes resolved by their generated keys
 * (svg_nodes.indexSvg), classes for selection / highlight / search / hooks, keyboard focus,
 * hover tooltip, pan and zoom. Talks to the outside only through the callbacks it is given. */
import { LayoutClient } from "./layout_client.js";
import { PanZoom, findingRank, measuredSize } from "./pan_zoom.js";
import { nodeAriaLabel, own } from "./resolve.js";
import { STRIPE_ROOM, fitLabels, indexSvg, setBadge, setParamStripe, setTitle, titleOf } from "./svg_nodes.js";
import { Tooltip } from "./tooltip.js";

/** ms a folded module's click waits for the second click of a double-click (which unfolds it) */
const DOUBLE_CLICK_MS = 500; // the common OS double-click time: at 300, a 380 ms one also hooked

export { titleOf };

/**
 * @typedef {import("./tooltip.js").NodeInfo} NodeInfo
 * @typedef {{onNodeClick?: (id: string) => void, onNodeDblClick?: (id: string) => void,
 *   onClusterDblClick?: (module: string) => void, onBackgroundClick?: () => void,
 *   onEscape?: () => void, onFit?: (fit: FitInfo) => void}} GraphCallbacks
 * @typedef {{fits: boolean, width: number, height: number, scale: number, readable: number,
 *   across: number}} FitInfo
 * @typedef {{nodes: number, ms: number, engine: string, retried: boolean, warnings: string[]}} RenderInfo
 */

export class GraphView {
  /**
   * @param {HTMLElement} viewport element the SVG goes into (position: relative)
   * @param {GraphCallbacks} callbacks
   * @param {{timeoutMs?: number}} [options]
   */
  constructor(viewport, callbacks, options = {}) {
    this.viewport = viewport;
    this.callbacks = callbacks;
    this.layout = new LayoutClient({ timeoutMs: options.timeoutMs });
    this.panZoom = new PanZoom(viewport);
    // a ghost (a parameter backward never reached: frozen, never called) is no finding to open
    // the first view on, nor where the gradient's graph is busiest
    // (a folded module that holds nothing but such parameters too: a frozen stage at fold depth 1)
    this.panZoom.ghostOf = (g) => isGhost(this.infoOf(this.idOf.get(g) ?? ""));
    this.panZoom.rankOf = (g) => {
      const i = this.infoOf(this.idOf.get(g) ?? "");
      return isGhost(i) ? 0 : findingRank(i);
    };
    this.tooltip = new Tooltip(viewport);
    this.placeholder = document.createElement("div");
    this.placeholder.className = "gvw-empty";
    this.placeholder.textContent = "No graph yet";
    viewport.appendChild(this.placeholder);
    /** @type {SVGSVGElement | null} */
    this.svg = null;
    /** SVG text of the last successful layout (what "Download SVG" saves). */
    this.svgText = "";
    this.shownDot = ""; // the DOT and key map now on screen (the same again needs no layout)
    this.shownKeys = "";
    this.renders = 0;
    /** @type {Map<string, SVGGElement>} */
    this.nodeEls = new Map();
    /** @type {SVGGElement[]} clusters of the drawn graph: their labels are fitted to their frames */
    this.clusterEls = [];
    /** @type {WeakMap<Element, string>} */
    this.idOf = new WeakMap();
    /** @type {WeakMap<Element, string>} cluster element -> module path */
    this.moduleOf = new WeakMap();
    /** @type {Record<string, NodeInfo>} */
    this.info = {};
    /** @type {Record<string, {hooked?: boolean, hooked_text?: string}>} module path -> its frame's hook marker */
    this.clusterInfo = {};
    this.selected = "";
    /** @type {string[]} */
    this.highlight = [];
    /** @type {string[]} */
    this.matches = [];
    this.current = "";
    this.seq = 0;
    this.onClick = this.onClick.bind(this);
    this.onDblClick = this.onDblClick.bind(this);
    this.onOver = this.onOver.bind(this);
    this.onMove = this.onMove.bind(this);
    this.onOut = this.onOut.bind(this);
    this.onKey = this.onKey.bind(this);
    viewport.addEventListener("click", this.onClick);
    viewport.addEventListener("keydown", this.onKey);
    viewport.addEventListener("dblclick", this.onDblClick);
    viewport.addEventListener("pointerover", this.onOver);
    viewport.addEventListener("pointermove", this.onMove);
    viewport.addEventListener("pointerout", this.onOut);
    // a new viewport size (the cell got wider, the chart moved below) fits again, unless the
    // user moved the view; the widget hears whether the whole graph still fits
    this.resizeTimer = 0;
    this.clickTimer = 0; // a folded module's click, waiting for a double-click ...
    this.pendingClick = ""; // ... on this node
    this.lastSize = "";
    this.baseHeight = ""; // the pane's height trait; a taller graph grows it (autoHeight)
    this.autoHeight = true; // until the user drags the viewport's resize grip
    this.shownHeight = 0;
    this.resizer = typeof ResizeObserver === "function" ? new ResizeObserver(() => this.resized()) : null;
    this.resizer?.observe(viewport);
  }

  resized() {
    clearTimeout(this.resizeTimer);
    this.resizeTimer = Number(setTimeout(() => {
      const r = this.viewport.getBoundingClientRect();
      const size = measuredSize(r); // "" while hidden: the next real size fits (and reports)
      if (!this.svg || !size || size === this.lastSize) return;
      if (this.shownHeight && Math.abs(r.height - this.shownHeight) > 2) this.autoHeight = false; // the grip
      this.lastSize = size;
      this.shownHeight = r.height;
      if (this.panZoom.userMoved) this.panZoom.flush(true);
      else this.fitReadable();
    }, 120));
  }

  /** @param {string} height the pane's height (CSS); a graph that needs more grows it */
  setBaseHeight(height) {
    this.baseHeight = height;
    this.autoHeight = true;
    this.viewport.style.height = height;
    if (this.svg && !this.panZoom.userMoved) this.fitReadable();
  }

  /** Grow the viewport (up to 4/5 of the window) when that shows the whole graph readably,
   *  back to the pane's height when it needs no more. */
  growToFit() {
    const basePx = Number.parseFloat(this.baseHeight);
    if (!this.autoHeight || !this.svg || !this.baseHeight.trim().endsWith("px") || !(basePx > 0)) return;
    const need = this.panZoom.readableSize();
    const width = this.viewport.getBoundingClientRect().width;
    const most = Math.max(basePx, Math.round((globalThis.innerHeight || 0) * 0.8));
    const h = need.w <= width && need.h > basePx ? Math.min(most, Math.ceil(need.h) + 2) : basePx;
    this.viewport.style.height = `${h}px`;
  }

  /** The first view: the whole graph if readable, else its readable top; tells onFit, but
   *  only when the viewport has a real size: a pane not laid out, hidden or detached (its
   *  cell scrolled away) says nothing, and fits again once the ResizeObserver sees a size. */
  fitReadable() {
    this.growToFit();
    this.panZoom.fit(true);
    const r = this.viewport.getBoundingClientRect();
    this.lastSize = measuredSize(r);
    if (!this.lastSize) return;
    this.shownHeight = r.height;
    this.callbacks.onFit?.(this.panZoom.fitInfo);
  }

  /**
   * Lay out and show `dot`. Resolves to null when a newer render superseded it;
   * rejects (keeping the previous graph on screen) when the layout fails.
   * @param {string} dot
   * @param {Record<string, string>} [keys] DOT key -> Python id (empty: titles are the ids)
   * @returns {Promise<RenderInfo | null>}
   */
  async render(dot, keys = {}) {
    const seq = ++this.seq;
    if (!dot.trim()) {
      this.layout.cancel();
      this.clear();
      return { nodes: 0, ms: 0, engine: "none", retried: false, warnings: [] };
    }
    const keyText = JSON.stringify(keys);
    if (this.svg && dot === this.shownDot && keyText === this.shownKeys) {
      // the same drawing (a hook toggled, a re-run with equal norms): only the markers change,
      // so no layout; an older layout still running is dropped by its sequence number
      this.applyAll();
      this.viewport.dataset.renders = String(++this.renders);
      return { nodes: this.nodeEls.size, ms: 0, engine: "unchanged", retried: false, warnings: [] };
    }
    let result;
    try {
      result = await this.layout.layout(dot);
    } catch (err) {
      if (seq !== this.seq || /** @type {any} */ (err)?.superseded) return null;
      throw err;
    }
    if (seq !== this.seq) return null;
    const doc = new DOMParser().parseFromString(result.svg, "image/svg+xml");
    const root = doc.documentElement;
    if (root.localName !== "svg" || doc.getElementsByTagName("parsererror").length) {
      throw new Error("Graphviz returned SVG the browser could not parse");
    }
    const svg = /** @type {SVGSVGElement} */ (/** @type {unknown} */ (document.importNode(root, true)));
    const before = [...this.nodeEls.keys()].sort().join("\n");
    this.index(svg, keys);
    const keepView = this.svg !== null && before === [...this.nodeEls.keys()].sort().join("\n");
    this.tooltip.hide();
    if (this.svg) this.svg.replaceWith(svg);
    else this.viewport.prepend(svg);
    this.svg = svg;
    this.svgText = result.svg;
    this.shownDot = dot;
    this.shownKeys = keyText;
    this.placeholder.hidden = true;
    this.panZoom.attach(svg, true);
    if (!keepView) this.fitReadable();
    this.applyAll();
    this.viewport.dataset.renders = String(++this.renders); // lets tests see a finished render
    return { nodes: this.nodeEls.size, ms: result.ms, engine: result.engine, retried: result.retried, warnings: result.warnings };
  }

  /** Remove the graph and show the placeholder. */
  clear() {
    this.svg?.remove();
    this.svg = null;
    this.svgText = "";
    this.shownDot = "";
    this.shownKeys = "";
    this.nodeEls.clear();
    this.placeholder.hidden = false;
    this.tooltip.hide();
  }

  /** @param {SVGSVGElement} svg @param {Record<string, string>} keys */
  index(svg, keys) {
    ({ nodeEls: this.nodeEls, idOf: this.idOf, moduleOf: this.moduleOf } = indexSvg(svg, keys));
    this.clusterEls = /** @type {SVGGElement[]} */ (Array.from(svg.querySelectorAll("g.cluster")));
  }

  /** @param {string} id @returns {NodeInfo | undefined} */
  infoOf(id) {
    return own(this.info, id) ? this.info[id] : undefined;
  }

  /** Node ids in document order. */
  nodeIds() {
    return [...this.nodeEls.keys()];
  }

  /** @param {Record<string, NodeInfo>} info */
  setNodeInfo(info) {
    this.info = info ?? {};
    this.applyAll();
  }

  /** @param {Record<string, {hooked?: boolean, hooked_text?: string}>} info module path -> hook marker */
  setClusterInfo(info) {
    this.clusterInfo = info ?? {};
    this.applyAll();
  }

  /**
   * @param {string} id @param {boolean} reveal centre the node if it is off screen
   * @returns {boolean} whether the node is in the current graph
   */
  setSelected(id, reveal) {
    this.selected = id || "";
    this.applyClasses();
    const el = this.nodeEls.get(this.selected);
    if (reveal && el && !this.panZoom.isVisible(el)) this.panZoom.centerOn(el);
    return Boolean(el);
  }

  /** @param {string[]} ids */
  setHighlight(ids) {
    this.highlight = Array.isArray(ids) ? ids.map(String) : [];
    this.applyClasses();
    const shown = this.highlight.map((id) => this.nodeEls.get(id)).filter(Boolean);
    const first = /** @type {SVGGElement | undefined} */ (shown[0]);
    if (first && !shown.some((el) => this.panZoom.isVisible(/** @type {Element} */ (el)))) {
      this.panZoom.centerOn(first);
    }
  }

  /** @param {string[]} matches @param {string | null} current @param {boolean} [center] */
  setMatches(matches, current, center = true) {
    this.matches = matches;
    this.current = current ?? "";
    this.applyClasses();
    const el = this.nodeEls.get(this.current);
    if (el && center) this.panZoom.centerOn(el);
  }

  /** Entries for the search box. */
  searchEntries() {
    return this.nodeIds().map((id) => {
      const i = this.infoOf(id) ?? {};
      const text = Array.from(this.nodeEls.get(id)?.querySelectorAll("text") ?? []).map((t) => t.textContent).join(" ");
      return { id, label: i.label, module: i.module, op: i.op, text };
    });
  }

  applyAll() {
    for (const [id, g] of this.nodeEls) {
      const i = this.infoOf(id);
      const name = nodeAriaLabel(id, i);
      g.setAttribute("aria-label", name);
      setTitle(g, name); // what the browser's own hover text and screen readers read
      for (const c of Array.from(g.classList)) if (c.startsWith("gvw-status-")) g.classList.remove(c);
      if (i?.status) g.classList.add(`gvw-status-${String(i.status).replace(/[^\w-]/g, "_")}`);
      g.classList.toggle("hooked", Boolean(i?.hooked));
      setBadge(g, Boolean(i?.hooked));
      setParamStripe(g, String(i?.param_text ?? ""), String(i?.param_color ?? ""));
      fitLabels(g, i?.param_text ? STRIPE_ROOM : 0);
    }
    for (const g of this.clusterEls) {
      const module = this.moduleOf.get(g) ?? "";
      const c = own(this.clusterInfo, module) ? this.clusterInfo[module] : undefined;
      const hooked = Boolean(c?.hooked);
      g.classList.toggle("hooked", hooked); // a hook on an open module: its frame shows it
      setTitle(g, hooked ? `${module || "(root)"} — ${String(c?.hooked_text ?? "hooked")}` : module || "(root)");
      setBadge(g, hooked);
      fitLabels(g, 0);
    }
    this.applyClasses();
  }

  applyClasses() {
    const hl = new Set(this.highlight);
    const m = new Set(this.matches);
    for (const [id, g] of this.nodeEls) {
      g.classList.toggle("gvw-selected", id === this.selected);
      g.classList.toggle("gvw-highlight", hl.has(id));
      g.classList.toggle("gvw-match", m.has(id));
      g.classList.toggle("gvw-current", id === this.current);
    }
    const anyHl = this.highlight.some((id) => this.nodeEls.has(id));
    this.viewport.closest(".gvw-pane")?.classList.toggle("gvw-has-highlight", anyHl);
  }

  /** @param {EventTarget | null} target @param {string} kind "node" | "cluster" */
  find(target, kind) {
    const el = target instanceof Element ? target.closest(`g.${kind}`) : null;
    if (!el || !this.viewport.contains(el)) return null;
    return (kind === "cluster" ? this.moduleOf.get(el) : this.idOf.get(el)) ?? null;
  }

  /** @param {MouseEvent} ev */
  onClick(ev) {
    const id = this.find(ev.target, "node");
    if (id === null) {
      if (this.find(ev.target, "cluster") === null) this.callbacks.onBackgroundClick?.();
      return;
    }
    if (!this.infoOf(id)?.expandable) {
      this.sendPendingClick();
      this.callbacks.onNodeClick?.(id);
      return;
    }
    // a folded module: a double-click unfolds it, so its click waits to see whether one comes
    // (sent at once, the double-click's two clicks toggled its hook on and off: two re-runs)
    if (this.pendingClick === id) {
      clearTimeout(this.clickTimer);
      this.pendingClick = "";
      if (ev.detail > 1) return; // the double-click's second click
    }
    // a click on another node sends the one waiting (quick clicks on two modules dropped the first)
    this.sendPendingClick();
    this.pendingClick = id;
    this.clickTimer = Number(setTimeout(() => this.sendPendingClick(), DOUBLE_CLICK_MS));
  }

  /** Send the folded module's click that waits for a double-click, now. */
  sendPendingClick() {
    clearTimeout(this.clickTimer);
    const id = this.pendingClick;
    this.pendingClick = "";
    if (id) this.callbacks.onNodeClick?.(id);
  }

  /** Enter / Space on a focused node = click; Escape clears. @param {KeyboardEvent} ev */
  onKey(ev) {
    if (ev.key === "Escape") {
      this.callbacks.onEscape?.();
      return;
    }
    if (ev.key !== "Enter" && ev.key !== " ") return;
    const id = this.find(ev.target, "node");
    if (id === null) return;
    ev.preventDefault();
    ev.stopPropagation(); // keep JupyterLab's Enter (edit cell) away
    this.callbacks.onNodeClick?.(id);
  }

  /** @param {MouseEvent} ev */
  onDblClick(ev) {
    clearTimeout(this.clickTimer);
    this.pendingClick = "";
    const id = this.find(ev.target, "node");
    if (id !== null) {
      this.callbacks.onNodeDblClick?.(id);
      return;
    }
    const module = this.find(ev.target, "cluster");
    if (module) this.callbacks.onClusterDblClick?.(module);
  }

  /** @param {PointerEvent} ev */
  onOver(ev) {
    if (this.panZoom.drag?.dragging) return;
    const id = this.find(ev.target, "node");
    if (id !== null) this.tooltip.show(id, this.infoOf(id), ev.clientX, ev.clientY);
  }

  /** @param {PointerEvent} ev */
  onMove(ev) {
    this.tooltip.move(ev.clientX, ev.clientY);
  }

  /** @param {PointerEvent} ev */
  onOut(ev) {
    const from = this.find(ev.target, "node");
    const to = this.find(ev.relatedTarget, "node");
    if (from !== null && from !== to) this.tooltip.hide();
  }

  zoomIn() { this.panZoom.zoomBy(1.25); }
  zoomOut() { this.panZoom.zoomBy(0.8); }
  /** Fit: the readable whole (or top) first; pressed again on that view, the whole graph at
   * any size. */
  fit() {
    const pz = this.panZoom;
    if (pz.clamped && !pz.userMoved) pz.fit(false);
    else this.fitReadable();
  }

  dispose() {
    this.seq++;
    this.layout.dispose();
    this.panZoom.detach();
    this.resizer?.disconnect();
    clearTimeout(this.resizeTimer);
    clearTimeout(this.clickTimer);
    const v = this.viewport;
    v.removeEventListener("click", this.onClick);
    v.removeEventListener("keydown", this.onKey);
    v.removeEventListener("dblclick", this.onDblClick);
    v.removeEventListener("pointerover", this.onOver);
    v.removeEventListener("pointermove", this.onMove);
    v.removeEventListener("pointerout", this.onOut);
  }
}

/** A node the gradient never reached on purpose or by a cut (a ghost parameter, or a folded
 *  module holding only such): never where a view opens. @param {NodeInfo | undefined} info */
function isGhost(info) {
  return info?.kind === "ghost" || info?.ghost === true;
}
