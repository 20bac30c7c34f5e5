// @ts-check
/** Hover tooltip for graph nodes: op, module, shape, grad norm, status. */

/**
 * @typedef {{label?: string, op?: string, module?: string, kind?: string, status?: string,
 *   grad_norm?: number | null, shape?: string | number[], hooked?: boolean,
 *   expandable?: string, collapsible?: string}} NodeInfo
 */

/**
 * Format a gradient norm compactly ("1.23e-05", "0.0123", "—" for missing).
 * @param {number | null | undefined} v
 */
export function formatNorm(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "—";
  if (!Number.isFinite(v)) return String(v);
  if (v === 0) return "0";
  const a = Math.abs(v);
  return a >= 1e-3 && a < 1e4 ? v.toPrecision(4).replace(/\.?0+$/, "") : v.toExponential(2);
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
  if (i.op) rows.push(["op", i.op]);
  if (i.module) rows.push(["module", i.module]);
  if (i.kind) rows.push(["kind", i.kind]);
  if (i.shape !== undefined && i.shape !== null && String(i.shape) !== "") {
    rows.push(["shape", Array.isArray(i.shape) ? `(${i.shape.join(", ")})` : String(i.shape)]);
  }
  if (info) rows.push(["grad norm", formatNorm(i.grad_norm)]);
  if (i.status) rows.push(["status", i.status]);
  if (i.hooked) rows.push(["hooked", "yes"]);
  if (i.expandable) rows.push(["double-click", `expand ${i.expandable}`]);
  else if (i.collapsible) rows.push(["double-click", `collapse ${i.collapsible}`]);
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
