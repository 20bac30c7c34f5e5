// @ts-check
/** Search box: case-insensitive substring match on node label, module and op, and on every
 * module and parameter name of the model (Python's `search_index`), drawn or folded away: a
 * name folded into a module or ×N group matches the node holding it, and Enter on that match
 * asks Python to unfold to it. */

/** @typedef {{id: string, label?: string, module?: string, op?: string, text?: string,
 *   folded?: string}} SearchEntry  `folded`: the name this folded node hides */

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
    .map((e) => e.id)
    .filter((id, i, all) => all.indexOf(id) === i);
}

/**
 * Search entries for the names of Python's index ([name, kind, showing id, "folded" | ""]):
 * one per name that a drawn node shows.
 * @param {unknown} index @returns {SearchEntry[]}
 */
export function indexEntries(index) {
  if (!Array.isArray(index)) return [];
  return index
    .filter((e) => Array.isArray(e) && e[2])
    .map((e) => ({ id: String(e[2]), label: String(e[0]), folded: e[3] ? String(e[0]) : "" }));
}

/**
 * The names hidden in folded nodes among the matches: match id -> the first name it hides
 * (only for ids no drawn entry matched by itself).
 * @param {string} query @param {SearchEntry[]} entries @returns {Map<string, string>}
 */
export function foldedMatches(query, entries) {
  const q = query.trim().toLowerCase();
  const out = new Map();
  if (!q) return out;
  const direct = new Set(findMatches(q, entries.filter((e) => !e.folded)));
  for (const e of entries) {
    if (e.folded && !direct.has(e.id) && !out.has(e.id) && e.folded.toLowerCase().includes(q)) out.set(e.id, e.folded);
  }
  return out;
}

export class SearchBox {
  /**
   * @param {HTMLInputElement} input
   * @param {HTMLElement} counter
   * @param {{entries: () => SearchEntry[],
   *   show: (matches: string[], current: string | null, center: boolean) => void,
   *   reveal?: (name: string) => void}} hooks
   */
  constructor(input, counter, hooks) {
    this.input = input;
    this.counter = counter;
    this.hooks = hooks;
    /** @type {string[]} */
    this.matches = [];
    /** @type {Map<string, string>} match id -> the name it holds folded away */
    this.folded = new Map();
    this.index = -1;
    this.revealed = ""; // the name Enter asked Python to unfold to: the next graph's current match
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
    this.revealed = "";
    const entries = this.hooks.entries();
    this.matches = findMatches(this.input.value, entries);
    this.folded = foldedMatches(this.input.value, entries);
    this.index = this.matches.length ? 0 : -1;
    this.show();
  }

  /** Recompute matches for a new graph, keeping the current match if it is still there. */
  refresh() {
    let current = this.index >= 0 ? this.matches[this.index] : null;
    const entries = this.hooks.entries();
    this.matches = findMatches(this.input.value, entries);
    this.folded = foldedMatches(this.input.value, entries);
    if (this.revealed) {
      // unfolded to the name Enter was on: go on from the node now showing it (the count
      // restarted at 1 and Enter went back through the earlier matches)
      const shown = entries.find((e) => e.label === this.revealed && !e.folded);
      if (shown) current = shown.id;
      this.revealed = "";
    }
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
    const name = this.folded.get(this.matches[this.index]);
    if (name && dir > 0 && this.hooks.reveal) {
      this.revealed = name;
      this.hooks.reveal(name); // a folded node holds the name: unfold to it (Python redraws)
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
    const held = n ? this.folded.get(this.matches[this.index]) : undefined;
    this.counter.textContent = q ? (n ? `${this.index + 1}/${n}` : "0/0") : "";
    this.counter.title = held ? `folded inside this node: ${held} (Enter unfolds to it)` : "";
    this.input.classList.toggle("gvw-no-match", Boolean(q) && n === 0);
    this.hooks.show(this.matches, n ? this.matches[this.index] : null, center);
  }
}
