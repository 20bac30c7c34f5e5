// @ts-check
/**
 * The graph itself: DOT -> SVG (Graphviz in a worker), node lookup by the
 * <title> Graphviz writes into every node and cluster, classes for
 * selection / highlight / search / hooks, hover tooltip, pan and zoom.
 * Talks to the outside only through the callbacks it is given.
 */
import { LayoutClient } from "./layout_client.js";
import { PanZoom } from "./pan_zoom.js";
import { Tooltip } from "./tooltip.js";

const SVG_NS = "http://www.w3.org/2000/svg";

/**
 * @typedef {import("./tooltip.js").NodeInfo} NodeInfo
 * @typedef {{onNodeClick?: (id: string) => void, onNodeDblClick?: (id: string) => void,
 *   onClusterDblClick?: (module: string) => void}} GraphCallbacks
 * @typedef {{nodes: number, ms: number, engine: string, retried: boolean, warnings: string[]}} RenderInfo
 */

/** @param {Element} g @returns {string} the text of the group's own <title> */
export function titleOf(g) {
  for (const child of Array.from(g.children)) {
    if (child.localName === "title") return child.textContent ?? "";
  }
  return "";
}

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
    this.tooltip = new Tooltip(viewport);
    this.placeholder = document.createElement("div");
    this.placeholder.className = "gvw-empty";
    this.placeholder.textContent = "No graph yet";
    viewport.appendChild(this.placeholder);
    /** @type {SVGSVGElement | null} */
    this.svg = null;
    /** SVG text of the last successful layout (what "Download SVG" saves). */
    this.svgText = "";
    /** @type {Map<string, SVGGElement>} */
    this.nodeEls = new Map();
    /** @type {WeakMap<Element, string>} */
    this.idOf = new WeakMap();
    /** @type {Record<string, NodeInfo>} */
    this.info = {};
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
    viewport.addEventListener("click", this.onClick);
    viewport.addEventListener("dblclick", this.onDblClick);
    viewport.addEventListener("pointerover", this.onOver);
    viewport.addEventListener("pointermove", this.onMove);
    viewport.addEventListener("pointerout", this.onOut);
  }

  /**
   * Lay out and show `dot`. Resolves to null when a newer render superseded it;
   * rejects (keeping the previous graph on screen) when the layout fails.
   * @param {string} dot
   * @returns {Promise<RenderInfo | null>}
   */
  async render(dot) {
    const seq = ++this.seq;
    if (!dot.trim()) {
      this.layout.cancel();
      this.clear();
      return { nodes: 0, ms: 0, engine: "none", retried: false, warnings: [] };
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
    const svg = /** @type {SVGSVGElement} */ (document.importNode(root, true));
    const before = [...this.nodeEls.keys()].sort().join("\n");
    this.index(svg);
    const keepView = this.svg !== null && before === [...this.nodeEls.keys()].sort().join("\n");
    this.tooltip.hide();
    if (this.svg) this.svg.replaceWith(svg);
    else this.viewport.prepend(svg);
    this.svg = svg;
    this.svgText = result.svg;
    this.placeholder.hidden = true;
    this.panZoom.attach(svg, keepView);
    this.applyAll();
    return { nodes: this.nodeEls.size, ms: result.ms, engine: result.engine, retried: result.retried, warnings: result.warnings };
  }

  /** Remove the graph and show the placeholder. */
  clear() {
    this.svg?.remove();
    this.svg = null;
    this.svgText = "";
    this.nodeEls.clear();
    this.placeholder.hidden = false;
    this.tooltip.hide();
  }

  /** @param {SVGSVGElement} svg */
  index(svg) {
    this.nodeEls = new Map();
    this.idOf = new WeakMap();
    for (const g of Array.from(svg.querySelectorAll("g.node"))) {
      const id = titleOf(g);
      this.nodeEls.set(id, /** @type {SVGGElement} */ (g));
      this.idOf.set(g, id);
    }
    for (const g of Array.from(svg.querySelectorAll("g.cluster"))) {
      this.idOf.set(g, titleOf(g));
    }
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
      const i = this.info[id] ?? {};
      const text = Array.from(this.nodeEls.get(id)?.querySelectorAll("text") ?? []).map((t) => t.textContent).join(" ");
      return { id, label: i.label, module: i.module, op: i.op, text };
    });
  }

  applyAll() {
    for (const [id, g] of this.nodeEls) {
      const i = this.info[id];
      for (const c of Array.from(g.classList)) if (c.startsWith("gvw-status-")) g.classList.remove(c);
      if (i?.status) g.classList.add(`gvw-status-${String(i.status).replace(/[^\w-]/g, "_")}`);
      g.classList.toggle("hooked", Boolean(i?.hooked));
      this.setBadge(g, Boolean(i?.hooked));
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

  /** Small dot in the top-right corner of hooked nodes. @param {SVGGElement} g @param {boolean} on */
  setBadge(g, on) {
    const old = g.querySelector(":scope > .gvw-hook-badge");
    if (!on) {
      old?.remove();
      return;
    }
    if (old) return;
    const shape = g.querySelector("polygon, ellipse, path, rect");
    if (!shape) return;
    let b;
    try {
      b = /** @type {SVGGraphicsElement} */ (shape).getBBox();
    } catch {
      return; // not rendered (e.g. hidden); the badge is cosmetic
    }
    const c = document.createElementNS(SVG_NS, "circle");
    c.setAttribute("class", "gvw-hook-badge");
    c.setAttribute("cx", String(b.x + b.width - 2));
    c.setAttribute("cy", String(b.y + 2));
    c.setAttribute("r", "4.5");
    g.appendChild(c);
  }

  /** @param {EventTarget | null} target @param {string} kind "node" | "cluster" */
  find(target, kind) {
    const el = target instanceof Element ? target.closest(`g.${kind}`) : null;
    return el && this.viewport.contains(el) ? this.idOf.get(el) ?? null : null;
  }

  /** @param {MouseEvent} ev */
  onClick(ev) {
    const id = this.find(ev.target, "node");
    if (id !== null) this.callbacks.onNodeClick?.(id);
  }

  /** @param {MouseEvent} ev */
  onDblClick(ev) {
    const id = this.find(ev.target, "node");
    if (id !== null) {
      this.callbacks.onNodeDblClick?.(id);
      return;
    }
    const title = this.find(ev.target, "cluster");
    if (title) this.callbacks.onClusterDblClick?.(title.replace(/^cluster_?/, ""));
  }

  /** @param {PointerEvent} ev */
  onOver(ev) {
    if (this.panZoom.drag?.dragging) return;
    const id = this.find(ev.target, "node");
    if (id !== null) this.tooltip.show(id, this.info[id], ev.clientX, ev.clientY);
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
  fit() { this.panZoom.fit(); }

  dispose() {
    this.seq++;
    this.layout.dispose();
    this.panZoom.detach();
    const v = this.viewport;
    v.removeEventListener("click", this.onClick);
    v.removeEventListener("dblclick", this.onDblClick);
    v.removeEventListener("pointerover", this.onOver);
    v.removeEventListener("pointermove", this.onMove);
    v.removeEventListener("pointerout", this.onOut);
  }
}
