// @ts-check
/** Search box: case-insensitive substring match on node label, module and op. */

/** @typedef {{id: string, label?: string, module?: string, op?: string, text?: string}} SearchEntry */

/**
 * Ids of the entries matching `query`, in entry order. An entry without
 * label/module/op falls back to `text` (the node's rendered text).
 * @param {string} query @param {SearchEntry[]} entries
 * @returns {string[]}
 */
export function findMatches(query, entries) {
  const q = query.trim().toLowerCase();
  if (!q) return [];
  return entries
    .filter((e) => {
      const fields = [e.label, e.module, e.op].filter((f) => typeof f === "string" && f !== "");
      if (fields.length === 0 && e.text) fields.push(e.text);
      return fields.some((f) => String(f).toLowerCase().includes(q));
    })
    .map((e) => e.id);
}

export class SearchBox {
  /**
   * @param {HTMLInputElement} input
   * @param {HTMLElement} counter
   * @param {{entries: () => SearchEntry[],
   *   show: (matches: string[], current: string | null, center: boolean) => void}} hooks
   */
  constructor(input, counter, hooks) {
    this.input = input;
    this.counter = counter;
    this.hooks = hooks;
    /** @type {string[]} */
    this.matches = [];
    this.index = -1;
    input.addEventListener("input", () => this.update());
    input.addEventListener("keydown", (ev) => {
      if (ev.key === "Enter") {
        ev.preventDefault();
        this.step(ev.shiftKey ? -1 : 1);
      } else if (ev.key === "Escape") {
        input.value = "";
        this.update();
      }
      ev.stopPropagation(); // keep JupyterLab shortcuts away from the box
    });
  }

  /** Recompute matches (after typing or after a new graph) and show the first. */
  update() {
    this.matches = findMatches(this.input.value, this.hooks.entries());
    this.index = this.matches.length ? 0 : -1;
    this.show();
  }

  /** Recompute matches for a new graph, keeping the current match if it is still there. */
  refresh() {
    const current = this.index >= 0 ? this.matches[this.index] : null;
    this.matches = findMatches(this.input.value, this.hooks.entries());
    const i = current === null ? -1 : this.matches.indexOf(current);
    this.index = i >= 0 ? i : this.matches.length ? 0 : -1;
    this.show(false);
  }

  /** Move to the next (+1) or previous (-1) match, wrapping around. @param {number} dir */
  step(dir) {
    if (!this.matches.length) {
      this.update();
      return;
    }
    const n = this.matches.length;
    this.index = (this.index + dir + n) % n;
    this.show();
  }

  /** @param {boolean} [center] centre the current match */
  show(center = true) {
    const q = this.input.value.trim();
    const n = this.matches.length;
    this.counter.textContent = q ? (n ? `${this.index + 1}/${n}` : "0/0") : "";
    this.input.classList.toggle("gvw-no-match", Boolean(q) && n === 0);
    this.hooks.show(this.matches, n ? this.matches[this.index] : null, center);
  }
}
