// @ts-check
/** Legend: one swatch per status ({status, label, color, dash}), plus the hook marker and
 * the parameter stripe. */

const SVG_NS = "http://www.w3.org/2000/svg";

/**
 * stroke-dasharray for a legend entry's `dash` value (bool, Graphviz style name or dasharray).
 * @param {unknown} dash
 * @returns {string}
 */
export function dashArray(dash) {
  if (dash === true) return "4 3";
  if (typeof dash !== "string") return "";
  if (/^[\d.\s,]+$/.test(dash.trim()) && dash.trim() !== "") return dash.trim();
  const styles = dash.split(",").map((x) => x.trim());
  if (styles.includes("dashed")) return "4 3";
  if (styles.includes("dotted")) return "1 2.5";
  return "";
}

/** Whether a Graphviz style list draws a bold line. @param {unknown} dash */
export function isBold(dash) {
  return typeof dash === "string" && dash.split(",").map((x) => x.trim()).includes("bold");
}

/**
 * @param {string} color @param {string} dash @param {boolean} [thick] @param {boolean} [bold]
 * @returns {SVGSVGElement}
 */
function swatch(color, dash, thick = false, bold = false) {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("width", "22");
  svg.setAttribute("height", "14");
  svg.setAttribute("class", "gvw-swatch");
  const rect = document.createElementNS(SVG_NS, "rect");
  rect.setAttribute("x", "2");
  rect.setAttribute("y", "2");
  rect.setAttribute("width", "18");
  rect.setAttribute("height", "10");
  rect.setAttribute("rx", "2");
  rect.setAttribute("fill", color);
  rect.setAttribute("fill-opacity", thick ? "0" : "0.35");
  rect.setAttribute("stroke", thick ? "#333" : color);
  rect.setAttribute("stroke-width", thick ? "3" : bold ? "2.5" : "1.5");
  if (dash) rect.setAttribute("stroke-dasharray", dash);
  svg.appendChild(rect);
  svg.setAttribute("aria-hidden", "true");
  return svg;
}

/**
 * The parameter stripe's swatch (svg_nodes.setParamStripe): a box with a bar on its left edge.
 * @returns {SVGSVGElement}
 */
function stripeSwatch() {
  const svg = swatch("#9a9a9a", "");
  const bar = document.createElementNS(SVG_NS, "rect");
  bar.setAttribute("x", "2");
  bar.setAttribute("y", "2");
  bar.setAttribute("width", "4");
  bar.setAttribute("height", "10");
  bar.setAttribute("fill", "#555");
  svg.appendChild(bar);
  return svg;
}

/**
 * Redraw the legend.
 * @param {HTMLElement} el
 * @param {{status?: string, label?: string, color?: string, dash?: unknown}[]} items
 * @param {boolean} showHooked add an entry for the hooked-node marker
 */
export function renderLegend(el, items, showHooked) {
  el.replaceChildren();
  for (const item of items ?? []) {
    const span = document.createElement("span");
    span.className = "gvw-legend-item";
    span.setAttribute("role", "listitem");
    if (item.status) span.dataset.status = item.status;
    span.appendChild(swatch(item.color || "#999", dashArray(item.dash), false, isBold(item.dash)));
    span.appendChild(document.createTextNode(item.label || item.status || ""));
    el.appendChild(span);
  }
  if (showHooked) {
    el.appendChild(extra("hooked", swatch("#333", "", true), "hooked"));
    // a folded module's left bar has the outline colour of its worst parameter's status
    el.appendChild(extra("stripe", stripeSwatch(), "left bar: its parameters' worst status"));
  }
  el.hidden = el.childElementCount === 0;
}

/**
 * A legend entry that is not a status.
 * @param {string} kind @param {SVGSVGElement} icon @param {string} text
 * @returns {HTMLSpanElement}
 */
function extra(kind, icon, text) {
  const span = document.createElement("span");
  span.className = "gvw-legend-item";
  span.dataset.status = kind;
  span.setAttribute("role", "listitem");
  span.appendChild(icon);
  span.appendChild(document.createTextNode(text));
  return span;
}
