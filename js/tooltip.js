// @ts-check
/** Hover tooltip for graph nodes: op, module, shape, grad norm, status. */

/**
 * @typedef {{label?: string, op?: string, module?: string, kind?: string, status?: string,
 *   grad_norm?: number | string | null, norm_text?: string, status_text?: string,
 *   shape?: string | number[], hooked?: boolean, hooked_text?: string,
 *   expandable?: string, collapsible?: string, param_status?: string, param_text?: string,
 *   param_color?: string, members_text?: string, alarm?: number, ghost?: boolean}} NodeInfo
 */

const NORM_LINE = "\u2016g\u2016 ";

/**
 * The gradient norm as Python wrote it: `norm_text` (render.node_texts), else the norm line of
 * the label Python wrote ("‖g‖ 1234"), else the value as sent. The page formats no numbers,
 * so a node's label and its tooltip always show the same text.
 * @param {NodeInfo} i
 * @returns {string}
 */
export function normText(i) {
  if (typeof i.norm_text === "string") return i.norm_text;
  const last = String(i.label ?? "").split("\n").pop() ?? "";
  if (i.grad_norm !== null && i.grad_norm !== undefined && last.startsWith(NORM_LINE)) {
    return last.slice(NORM_LINE.length);
  }
  return i.grad_norm === null || i.grad_norm === undefined ? "None" : String(i.grad_norm);
}

/**
 * A shape as Python writes a tuple, as the node's label does: (8, 16), (16,), ().
 * @param {number[]} shape
 * @returns {string}
 */
export function shapeText(shape) {
  return shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(", ")})`;
}

/**
 * Rows shown in the tooltip for a node (label first, then key/value pairs).
 * @param {string} id @param {NodeInfo | undefined} info
 * @returns {{title: string, rows: [string, string][]}}
 */
export function tooltipRows(id, info) {
  const i = info ?? {};
  /** @type {[string, string][]} */
  const rows = [];
  // a ghost stands for a parameter the gradient never reached: "op Ghost / kind ghost" says
  // nothing to a reader, what it is does
  if (i.kind === "ghost") rows.push(["node", "parameter"]);
  else if (i.op) rows.push(["op", i.op]);
  if (i.module) rows.push(["module", i.module]);
  if (i.kind && i.kind !== "ghost") rows.push(["kind", i.kind]);
  if (i.shape !== undefined && i.shape !== null && String(i.shape) !== "") {
    rows.push(["shape", Array.isArray(i.shape) ? shapeText(i.shape) : String(i.shape)]);
  }
  if (info) rows.push(["grad norm", normText(i)]);
  // the status in Python's words (a ghost's says why it got none), else its code
  if (i.status) rows.push(["status", i.status_text || i.status]);
  if (i.param_text) rows.push(["parameters", i.param_text]);
  // the hooks it shows (Python's "hooked: backward at layer2.0"), else just that it is hooked
  if (i.hooked) rows.push(["hooked", String(i.hooked_text ?? "").replace(/^hooked: /, "") || "yes"]);
  // both are the node's own module, which the module row names (as text made visible: these
  // travel raw); a 300-character name was printed three times
  if (i.expandable) rows.push(["double-click", "expand this module"]);
  else if (i.collapsible) rows.push(["double-click", "collapse this module"]);
  return { title: (i.label || id).split("\n")[0], rows };
}

export class Tooltip {
  /** @param {HTMLElement} host positioned ancestor the tooltip lives in */
  constructor(host) {
    this.host = host;
    this.el = document.createElement("div");
    this.el.className = "gvw-tooltip";
    this.el.hidden = true;
    host.appendChild(this.el);
  }

  /** @param {string} id @param {NodeInfo | undefined} info @param {number} cx @param {number} cy */
  show(id, info, cx, cy) {
    const { title, rows } = tooltipRows(id, info);
    this.el.replaceChildren();
    const head = document.createElement("div");
    head.className = "gvw-tooltip-title";
    head.textContent = title;
    this.el.appendChild(head);
    const table = document.createElement("table");
    for (const [k, v] of rows) {
      const tr = table.insertRow();
      tr.insertCell().textContent = k;
      tr.insertCell().textContent = v;
    }
    this.el.appendChild(table);
    this.el.hidden = false;
    this.move(cx, cy);
  }

  /** @param {number} cx @param {number} cy */
  move(cx, cy) {
    if (this.el.hidden) return;
    const r = this.host.getBoundingClientRect();
    const w = this.el.offsetWidth;
    const h = this.el.offsetHeight;
    let x = cx - r.left + 14;
    let y = cy - r.top + 14;
    if (x + w > r.width) x = Math.max(0, cx - r.left - w - 10);
    if (y + h > r.height) y = Math.max(0, cy - r.top - h - 10);
    this.el.style.left = `${x}px`;
    this.el.style.top = `${y}px`;
  }

  hide() {
    this.el.hidden = true;
  }
}
