// @ts-check
/** Small DOM helpers for the nodes and clusters of Graphviz SVG: titles, hook badge. */

import { clusterModuleFor, nodeIdFor } from "./resolve.js";

const SVG_NS = "http://www.w3.org/2000/svg";

/**
 * Resolve a laid-out SVG: every drawn node to its Python id (focusable, a button), every
 * cluster to its module (its tooltip title the module path, never the DOT key).
 * @param {SVGSVGElement} svg @param {Record<string, string>} keys DOT key -> Python id
 */
export function indexSvg(svg, keys) {
  /** @type {Map<string, SVGGElement>} */
  const nodeEls = new Map();
  /** @type {WeakMap<Element, string>} */
  const idOf = new WeakMap();
  /** @type {WeakMap<Element, string>} */
  const moduleOf = new WeakMap();
  for (const g of Array.from(svg.querySelectorAll("g.node"))) {
    const key = titleOf(g);
    const id = nodeIdFor(key, g.id, keys);
    if (id === null) continue;
    g.setAttribute("data-key", key);
    g.setAttribute("tabindex", "0");
    g.setAttribute("role", "button");
    nodeEls.set(id, /** @type {SVGGElement} */ (g));
    idOf.set(g, id);
  }
  for (const g of Array.from(svg.querySelectorAll("g.cluster"))) {
    const module = clusterModuleFor(titleOf(g), g.id, keys);
    if (module === null) continue;
    g.setAttribute("data-key", titleOf(g));
    moduleOf.set(g, module);
    setTitle(g, module || "(root)");
  }
  return { nodeEls, idOf, moduleOf };
}

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


/**
 * A folded module's parameter health: a stripe along the node's left edge in the colour of its
 * worst parameter status, whose title says it (e.g. "8 params: ..." in the words Python sent), so a module
 * drawn healthy (its input gradient flows) still shows that its weights get none.
 * @param {SVGGElement} g @param {string} text "" removes it @param {string} color
 */
export function setParamStripe(g, text, color) {
  const old = g.querySelector(":scope > .gvw-param-badge");
  if (!text) {
    old?.remove();
    return;
  }
  if (old && old.getAttribute("data-text") === text) return;
  old?.remove();
  const shape = g.querySelector("polygon, path, rect");
  if (!shape) return;
  let b;
  try {
    b = /** @type {SVGGraphicsElement} */ (shape).getBBox();
  } catch {
    return;
  }
  const badge = document.createElementNS(SVG_NS, "g");
  badge.setAttribute("class", "gvw-param-badge");
  badge.setAttribute("data-text", text);
  const title = document.createElementNS(SVG_NS, "title");
  title.textContent = text;
  const r = document.createElementNS(SVG_NS, "rect");
  r.setAttribute("x", String(b.x + 1));
  r.setAttribute("y", String(b.y + 1));
  r.setAttribute("width", "6");
  r.setAttribute("height", String(Math.max(0, b.height - 2)));
  r.setAttribute("fill", color || "#9a9a9a");
  badge.append(title, r);
  g.appendChild(badge);
}

/** Space kept between a label and its shape's sides, in SVG units. */
const LABEL_PAD = 3;
/** What a parameter stripe (setParamStripe) takes of a node's left edge. */
export const STRIPE_ROOM = 8;

/**
 * Squeeze each label line of a node into its shape. Graphviz sized the shape with its own
 * metrics of "Helvetica"; the browser draws the nearest font it has (often a wider one), so a
 * long label ran over the border; a parameter stripe takes `inset` more on the left. A folded
 * module's box3d outline is wider than its front face by the depth drawn on the right: lines
 * fit the face (`faceOf`). A cluster's label (its module's path and type, drawn above its
 * frame) is fitted to the frame the same way, with no inset. Lines that fit are left as drawn;
 * the text itself never changes.
 * @param {SVGGElement} g @param {number} inset
 */
export function fitLabels(g, inset) {
  if (g.getAttribute("data-fit") === String(inset)) return;
  const face = faceOf(g);
  if (!face) return;
  g.setAttribute("data-fit", String(inset));
  fitLines(Array.from(g.querySelectorAll(":scope > text")), face.left + LABEL_PAD + inset, face.right - LABEL_PAD);
}

/**
 * The horizontal extent of a node's or cluster's shape (for a box3d, of its front face: the
 * outline less the depth its inner edges mark off), or null before it is laid out.
 * @param {SVGGElement} g
 * @returns {{left: number, right: number} | null}
 */
export function faceOf(g) {
  const shape = /** @type {SVGGraphicsElement | null} */ (
    g.querySelector(":scope > polygon, :scope > path, :scope > ellipse")
  );
  if (!shape || typeof shape.getBBox !== "function") return null;
  try {
    const box = shape.getBBox();
    if (!(box.width > 0)) return null; // not drawn yet (hidden): fitted when next applied
    let right = box.x + box.width;
    for (const line of Array.from(g.querySelectorAll(":scope > polyline"))) {
      const b = /** @type {SVGGraphicsElement} */ (line).getBBox();
      right = Math.min(right, b.x + b.width);
    }
    return { left: box.x, right: right > box.x ? right : box.x + box.width };
  } catch {
    return null; // a DOM without layout
  }
}

/**
 * Lines between `left` and `right`: one wider than that is squeezed to it, one that fits the
 * width but sticks out is moved to the middle; the others stay as Graphviz placed them.
 * @param {Element[]} lines @param {number} left @param {number} right
 */
function fitLines(lines, left, right) {
  const room = right - left;
  for (const t of lines) {
    const text = /** @type {SVGTextElement} */ (t);
    const x0 = text.getAttribute("data-x0") ?? text.getAttribute("x") ?? "0";
    text.setAttribute("data-x0", x0);
    text.removeAttribute("textLength");
    text.removeAttribute("lengthAdjust");
    text.setAttribute("x", x0);
    if (room <= 0) continue;
    const drawn = text.getComputedTextLength();
    const anchor = text.getAttribute("text-anchor") ?? "start";
    const start = anchor === "middle" ? Number(x0) - drawn / 2 : anchor === "end" ? Number(x0) - drawn : Number(x0);
    if (start >= left - 0.5 && start + drawn <= right + 0.5) continue;
    if (drawn > room) {
      text.setAttribute("textLength", String(room));
      text.setAttribute("lengthAdjust", "spacingAndGlyphs");
    }
    const width = Math.min(drawn, room);
    const at = anchor === "middle" ? left + room / 2 : anchor === "end" ? left + (room + width) / 2 : left + (room - width) / 2;
    text.setAttribute("x", String(at));
  }
}
