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
  const rect = svgRect({
    x: 2, y: 2, width: 18, height: 10, rx: 2, fill: color,
    "fill-opacity": thick ? 0 : 0.35,
    stroke: thick ? "#333" : color,
    "stroke-width": thick ? 3 : bold ? 2.5 : 1.5,
  });
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
  svg.appendChild(svgRect({ x: 2, y: 2, width: 4, height: 10, fill: "#555" }));
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

/**
 * An SVG rect with these attributes.
 * @param {Record<string, string | number>} attrs
 * @returns {SVGRectElement}
 */
function svgRect(attrs) {
  const rect = document.createElementNS(SVG_NS, "rect");
  for (const [name, value] of Object.entries(attrs)) rect.setAttribute(name, String(value));
  return rect;
}
