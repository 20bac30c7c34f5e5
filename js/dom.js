// @ts-check
/** Builds the pane's DOM skeleton: toolbar, status line, legend, graph viewport. */

/**
 * @param {string} tag @param {string} cls @param {Record<string, string>} [attrs] @param {string} [text]
 * @returns {HTMLElement}
 */
function make(tag, cls, attrs = {}, text = "") {
  const el = document.createElement(tag);
  el.className = cls;
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  if (text) el.textContent = text;
  return el;
}

/**
 * @typedef {{root: HTMLElement, zoomIn: HTMLElement, zoomOut: HTMLElement, fit: HTMLElement,
 *   search: HTMLInputElement, count: HTMLElement, download: HTMLElement, status: HTMLElement,
 *   legend: HTMLElement, viewport: HTMLElement}} PaneParts
 */

/** @returns {PaneParts} */
export function buildPane() {
  const root = make("div", "gvw-pane");
  const bar = make("div", "gvw-toolbar");
  const zoomIn = make("button", "gvw-zoom-in", { type: "button", title: "Zoom in", "aria-label": "Zoom in" }, "+");
  const zoomOut = make("button", "gvw-zoom-out", { type: "button", title: "Zoom out", "aria-label": "Zoom out" }, "\u2212");
  const fit = make("button", "gvw-fit", { type: "button", title: "Fit the whole graph", "aria-label": "Fit the whole graph" }, "Fit");
  const search = /** @type {HTMLInputElement} */ (make("input", "gvw-search", {
    type: "search", placeholder: "Search nodes (Enter: next)", "aria-label": "Search nodes",
    "data-lm-suppress-shortcuts": "true", spellcheck: "false",
  }));
  const count = make("span", "gvw-count", { "aria-live": "polite" });
  const spacer = make("span", "gvw-spacer");
  const download = make("button", "gvw-download", { type: "button", title: "Save the graph as an SVG file" }, "Download SVG");
  bar.append(zoomIn, zoomOut, fit, search, count, spacer, download);
  const status = make("div", "gvw-status", { role: "status", "data-level": "info", tabindex: "0", "aria-expanded": "false" });
  // one row high, so nothing moves as runs come and go; a click (or Enter) shows it whole:
  // the findings come last and were readable only on hover
  const toggle = () => status.setAttribute("aria-expanded", String(status.classList.toggle("gvw-open")));
  status.addEventListener("click", toggle);
  status.addEventListener("keydown", (ev) => { if (ev.key === "Enter") toggle(); });
  const legend = make("div", "gvw-legend", { role: "list", "aria-label": "Legend" });
  const viewport = make("div", "gvw-viewport", { role: "group", "aria-label": "Backward graph: Tab to a node, Enter to click it, Escape to clear the highlight" });
  root.append(bar, status, legend, viewport);
  return { root, zoomIn, zoomOut, fit, search, count, download, status, legend, viewport };
}

/**
 * Offer `text` as a file download (client side, via a blob: URL).
 * @param {string} text @param {string} filename @param {string} [mime]
 */
export function downloadText(text, filename, mime = "image/svg+xml") {
  const url = URL.createObjectURL(new Blob([text], { type: mime }));
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  a.style.display = "none";
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/**
 * The nearest ancestor of `el` matching `selector`, through the shadow roots around it.
 * @param {Element} el @param {string} selector @returns {HTMLElement | null}
 */
export function closestAcross(el, selector) {
  /** @type {Element | null} */
  let node = el;
  while (node) {
    const found = node.closest(selector);
    if (found) return /** @type {HTMLElement} */ (found);
    const root = /** @type {Node & {host?: Element}} */ (node.getRootNode());
    node = root.host ?? null; // a shadow root's host; a document has none
  }
  return null;
}

/**
 * The element `el` scrolls in: the nearest ancestor (through shadow roots) whose content
 * overflows a scrolling box, else the document's scrolling element.
 * @param {Element} el @returns {Element}
 */
export function scrollerOf(el) {
  /** @type {Element | null} */
  let node = el.parentElement ?? /** @type {any} */ (el.getRootNode()).host ?? null;
  while (node) {
    const y = getComputedStyle(node).overflowY;
    if ((y === "auto" || y === "scroll") && node.scrollHeight > node.clientHeight) return node;
    node = node.parentElement ?? /** @type {any} */ (node.getRootNode()).host ?? null;
  }
  return document.scrollingElement ?? document.documentElement;
}

/**
 * Keep `el` where it is on screen for `ms`: content above it that grows or shrinks (the hook
 * readout filling after a click) scrolls its scroller by as much, so the graph stays under
 * the pointer. A scroll by the user moves `el` and the scroll offset together: left alone.
 * @param {Element} el @param {number} [ms]
 */
export function holdPlace(el, ms = 4000) {
  const held = HOLDING.get(el);
  if (held) { // one loop per element: two would each scroll by the same shift
    held.until = performance.now() + ms;
    return;
  }
  const scroller = scrollerOf(el);
  const at = () => el.getBoundingClientRect().top + scroller.scrollTop; // content position
  const state = { until: performance.now() + ms, anchor: at() };
  HOLDING.set(el, state);
  const frame = () => {
    const moved = at() - state.anchor;
    if (Math.abs(moved) > 1) {
      scroller.scrollTop += moved;
      state.anchor = at(); // where the layout put it now (the scroll keeps it on screen)
    }
    if (performance.now() < state.until && el.isConnected) requestAnimationFrame(frame);
    else HOLDING.delete(el);
  };
  requestAnimationFrame(frame);
}

/** @type {WeakMap<Element, {until: number, anchor: number}>} the elements held in place now */
const HOLDING = new WeakMap();
