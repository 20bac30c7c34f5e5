// @ts-check
/**
 * Pure helpers (no DOM): map Graphviz SVG elements back to Python ids, and the text the page
 * shows for a node. Python names DOT nodes n0, n1, ... and clusters cluster_c0, ... and sends
 * `keys` (key -> Python node id or module path) with the DOT, so no user text ever has to
 * survive Graphviz's trip into SVG titles. A DOT written by hand (no keys) falls back to the
 * old convention: node titles are the ids, cluster titles are "cluster_" + module path.
 */

/** @typedef {Record<string, string>} KeyMap */

/** @param {object | null | undefined} obj @param {string} key */
export function own(obj, key) {
  return obj !== null && obj !== undefined && Object.prototype.hasOwnProperty.call(obj, key);
}

/** @param {KeyMap | null | undefined} keys */
function hasKeys(keys) {
  return Boolean(keys) && typeof keys === "object" && Object.keys(/** @type {object} */ (keys)).length > 0;
}

/**
 * Python node id of a `g.node` from its <title> text and its `id` attribute; null when the
 * element is not one of ours.
 * @param {string} title @param {string} gid @param {KeyMap | null | undefined} keys
 * @returns {string | null}
 */
export function nodeIdFor(title, gid, keys) {
  if (!hasKeys(keys)) return title;
  const k = /** @type {KeyMap} */ (keys);
  if (own(k, title)) return k[title];
  if (gid && own(k, gid)) return k[gid];
  return null;
}

/**
 * Module path of a `g.cluster` (what a double-click folds).
 * @param {string} title @param {string} gid @param {KeyMap | null | undefined} keys
 * @returns {string | null}
 */
export function clusterModuleFor(title, gid, keys) {
  const bare = title.replace(/^cluster_?/, "");
  if (!hasKeys(keys)) return bare;
  const k = /** @type {KeyMap} */ (keys);
  if (gid && own(k, gid)) return k[gid];
  return own(k, bare) ? k[bare] : null;
}

/**
 * Accessible name of a node: first label line, status in words (`status_text`, sent by Python
 * from vocabulary.STYLES, the one place of the words; hand-written node info without it: the
 * status name), module, hook state (the hooks it shows, in Python's `hooked_text`: "hooked:
 * backward at layer2.0"; a folded node names those folded inside it).
 * @param {string} id
 * @param {{label?: string, status?: string, status_text?: string, module?: string,
 *   hooked?: boolean, hooked_text?: string} | undefined} info
 */
export function nodeAriaLabel(id, info) {
  const i = info ?? {};
  const parts = [String(i.label || id).split("\n")[0] || id];
  if (i.status_text) parts.push(String(i.status_text));
  else if (i.status) parts.push(String(i.status));
  if (i.module) parts.push(`module ${i.module}`);
  if (i.hooked) parts.push(String(i.hooked_text || "hooked"));
  return parts.join(", ");
}

/**
 * What the status line shows: a local error wins, then the layout's busy state, then Python's text.
 * @param {{localError: string, busy: boolean, note: string, text: string, level: string}} s
 * @returns {{text: string, level: string}}
 */
export function statusView(s) {
  if (s.localError) return { text: s.localError, level: "error" };
  if (s.busy) return { text: "Laying out graph\u2026", level: "busy" };
  if (s.note) return { text: s.note, level: "busy" };
  return { text: s.text ?? "", level: s.level || "info" };
}
