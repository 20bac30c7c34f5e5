// @ts-check
/** Small DOM helpers for the nodes and clusters of Graphviz SVG: titles, hook badge. */

const SVG_NS = "http://www.w3.org/2000/svg";

/** @param {Element} g @returns {string} the text of the group's own <title> */
export function titleOf(g) {
  for (const child of Array.from(g.children)) {
    if (child.localName === "title") return child.textContent ?? "";
  }
  return "";
}

/** Replace the text of the group's own <title>. @param {Element} g @param {string} text */
export function setTitle(g, text) {
  for (const child of Array.from(g.children)) {
    if (child.localName === "title") {
      if (child.textContent !== text) child.textContent = text;
      return;
    }
  }
}

/** Small dot in the top-right corner of hooked nodes. @param {SVGGElement} g @param {boolean} on */
export function setBadge(g, on) {
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

