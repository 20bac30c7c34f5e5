// @ts-check
// Host of the standalone page (gradviz_widgets/page.py): runs the GraphPane front end against an
// in-page model instead of a kernel. Copied next to the bundle at build time; inlined in the page.
// Everything the page shows from the run is set as text (textContent), never as markup.

/** @typedef {{label: string, depth: number|null, dot: string, key_map: Record<string,string>, nodes: Record<string, any>, clusters?: Record<string, any>, drawn?: number, default?: boolean}} View */

/** A model with the anywidget surface the GraphPane uses (get/set/on/off/send/save_changes). */
/** Seconds a view's layout may take before the page shows the next deeper view instead. */
const LAYOUT_TIMEOUT_S = 20;

export function pageModel(/** @type {Record<string, any>} */ traits, /** @type {(msg: any) => void} */ onMessage) {
  /** @type {Record<string, Function[]>} */
  const listeners = {};
  return {
    get: (/** @type {string} */ k) => traits[k],
    set(/** @type {string} */ k, /** @type {any} */ v) {
      traits[k] = v;
      for (const fn of listeners[`change:${k}`] ?? []) fn();
    },
    save_changes() {},
    on(/** @type {string} */ ev, /** @type {Function} */ fn) { (listeners[ev] ??= []).push(fn); },
    off(/** @type {string} */ ev, /** @type {Function} */ fn) {
      listeners[ev] = (listeners[ev] ?? []).filter((f) => f !== fn);
    },
    send: (/** @type {any} */ msg) => onMessage(msg),
  };
}

/**
 * Index of the view to show after a double-click on `module`: where it is folded, the most
 * folded view that draws it open; where it is open, the least folded view that folds it (the
 * page holds whole-depth views only, so modules at the same depth fold and unfold together).
 * The views come in any order (the overview first): they are ranked by depth, full = deepest.
 */
export function nextView(/** @type {View[]} */ views, /** @type {number} */ current, /** @type {string} */ module) {
  // folded itself or inside a folded ancestor
  const foldsIt = (/** @type {View} */ v) =>
    Object.values(v.nodes).some(
      (n) => typeof n.expandable === "string" && (n.expandable === module || module.startsWith(`${n.expandable}.`)),
    );
  const rank = (/** @type {number} */ i) => views[i].depth ?? Infinity;
  const folded = foldsIt(views[current]);
  const candidates = views.map((_, i) => i).filter((i) => foldsIt(views[i]) !== folded);
  if (!candidates.length) return current;
  // unfolding: the shallowest view that opens it; folding: the deepest that closes it
  return candidates.reduce((best, i) => ((folded ? rank(i) < rank(best) : rank(i) > rank(best)) ? i : best));
}

/**
 * The view to show when view `failed` could not be laid out: the next deeper one not tried
 * yet (a folded view can be the hard one: blocks called in a loop from the root, folded into
 * one node with hundreds of edges, while the full graph lays out in a second); -1 if none.
 * @param {View[]} views @param {number} failed @param {Set<number>} tried
 */
export function fallbackView(views, failed, tried) {
  const rank = (/** @type {number} */ i) => views[i].depth ?? Infinity;
  const deeper = views.map((_, i) => i).filter((i) => !tried.has(i) && rank(i) > rank(failed));
  return deeper.length ? deeper.reduce((best, i) => (rank(i) < rank(best) ? i : best)) : -1;
}

/** The first view (from `start`) that draws node `id`, or -1. */
export function viewWith(/** @type {View[]} */ views, /** @type {string} */ id, start = 0) {
  for (let i = 0; i < views.length; i++) {
    const j = (start + i) % views.length;
    if (id in views[j].nodes) return j;
  }
  return -1;
}

/**
 * What "Selected" says once view `view` is shown: the selected node as drawn there, or, when
 * that view folds it away, that it is folded (never a node the page no longer draws).
 * @param {string} id the selected node ("" when none) @param {View} view
 * @returns {{selected: string, text: string | null}} null text: leave "Selected" as it is
 */
export function selectionIn(id, view) {
  if (!id) return { selected: "", text: null };
  if (id in view.nodes) return { selected: id, text: describe(id, view.nodes[id]) };
  return { selected: "", text: `${id}\nnot drawn at this fold level (inside a folded module): unfold to see it` };
}

/**
 * The graph pane's status line for view `view`: what it draws (the header above already shows
 * the run's loss line, so the pane does not repeat it).
 * @param {View} view @returns {string}
 */
export function viewStatus(view) {
  const n = view.drawn ?? Object.keys(view.nodes).length; // the nodes the DOT draws
  return `${view.label}: ${n} node${n === 1 ? "" : "s"} drawn; click one to see it under Selected`;
}

function describe(/** @type {string} */ id, /** @type {any} */ info) {
  if (!info) return id;
  return `${info.label}\nstatus: ${info.status}\nmodule: ${info.module}`;
}

async function main() {
  const stateEl = document.getElementById("gvw-state");
  const bundleEl = document.getElementById("gvw-bundle");
  const graphEl = document.getElementById("graph");
  const select = /** @type {HTMLSelectElement|null} */ (document.getElementById("depth"));
  const detail = document.getElementById("detail");
  if (!stateEl || !bundleEl || !graphEl || !select || !detail) return;
  const state = JSON.parse(stateEl.textContent ?? "{}");
  /** @type {View[]} */
  const views = state.views;
  let current = 0;
  const traits = { dot: "", key_map: {}, nodes: {}, clusters: {}, revision: 0, selected: "", highlight: [],
    legend: state.legend, status_text: "", status_level: "info", rendered: {},
    height: "70vh", layout_timeout: LAYOUT_TIMEOUT_S };
  const tried = new Set();
  const model = pageModel(traits, (msg) => {
    if (msg.kind === "node_click") {
      model.set("selected", msg.id);
      detail.textContent = describe(msg.id, views[current].nodes[msg.id]);
    } else if (msg.kind === "toggle_scope") {
      show(nextView(views, current, String(msg.module)));
    } else if (msg.kind === "layout_error" && msg.revision === traits.revision) {
      const failed = views[current];
      tried.add(current);
      const next = fallbackView(views, current, tried);
      if (next < 0) return;
      show(next);
      model.set("status_text", `${failed.label} could not be laid out (${msg.message}); ` +
        `showing ${viewStatus(views[next])}`);
      model.set("status_level", "warning");
    }
  });
  const show = (/** @type {number} */ i) => {
    current = i;
    select.value = String(i);
    const v = views[i];
    model.set("key_map", v.key_map);
    model.set("nodes", v.nodes);
    model.set("clusters", v.clusters ?? {});
    model.set("dot", v.dot);
    model.set("revision", Number(traits.revision) + 1);
    model.set("status_text", viewStatus(v));
    model.set("status_level", "info");
    const kept = selectionIn(String(traits.selected ?? ""), v);
    if (kept.text !== null) detail.textContent = kept.text;
    if (kept.selected !== traits.selected) model.set("selected", kept.selected);
  };
  views.forEach((v, i) => {
    const opt = document.createElement("option");
    opt.value = String(i);
    opt.textContent = v.label;
    select.append(opt);
  });
  select.addEventListener("change", () => show(Number(select.value)));
  const url = URL.createObjectURL(new Blob([bundleEl.textContent ?? ""], { type: "text/javascript" }));
  const widget = (await import(url)).default;
  show(Math.max(0, views.findIndex((v) => v.default))); // the auto depth: the menu is in depth order
  await widget.render({ model, el: graphEl });
  const pick = (/** @type {Element} */ bar) => {
    const id = state.params[Number(bar.getAttribute("data-row"))];
    const at = id in views[current].nodes ? current : viewWith(views, id, current);
    if (at >= 0 && at !== current) show(at);
    model.set("selected", id);
    detail.textContent = describe(id, at >= 0 ? views[at].nodes[id] : undefined);
  };
  for (const bar of document.querySelectorAll("#chart .bar")) {
    bar.addEventListener("click", () => pick(bar));
    bar.addEventListener("keydown", (e) => {
      const key = /** @type {KeyboardEvent} */ (e).key;
      if (key === "Enter" || key === " ") { e.preventDefault(); pick(bar); }
    });
  }
  document.body.dataset.ready = "1";
}

if (typeof document !== "undefined") main();
