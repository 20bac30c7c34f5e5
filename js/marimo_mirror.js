// @ts-check
/**
 * The front end of the marimo mirror (gradviz_widgets/widget/marimo_mirror.py, Mirror): draws
 * ipywidgets controls from a plain description (`tree`) and sends each user change back.
 * Labels, options and tooltips are set as text (textContent, title, aria-label), never as
 * markup; only `html` items (the loss line, the compare notes, the hook readout, all built
 * escaped by the widget's own code) are set as HTML.
 */

/** @typedef {{id: number, kind: string, hidden?: boolean, label?: string, key?: string,
 *   tooltip?: string, tooltips?: string[], primary?: boolean, pressed?: boolean,
 *   disabled?: boolean, options?: string[], index?: number, value?: unknown, row?: boolean,
 *   children?: Item[], html?: string}} Item
 * @typedef {(change: Record<string, unknown>) => void} Send */

/** @param {string} tag @param {string} [cls] @param {string} [text] @returns {any} */
export function make(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

/** @param {Item} n @param {HTMLElement} control */
function labelled(n, control) {
  const wrap = make("span", "gvm-field");
  control.setAttribute("aria-label", n.label || "");
  if (n.label) wrap.appendChild(make("span", "gvm-label", n.label));
  wrap.appendChild(control);
  return wrap;
}

/** @param {Partial<Item>} n @param {Send} send */
function button(n, send) {
  const b = make("button", "gvm-button" + (n.primary ? " gvm-primary" : ""), n.label);
  b.type = "button";
  b.dataset.gvmKey = n.key ?? String(n.id);
  if (n.tooltip) b.title = n.tooltip;
  if (n.pressed !== undefined) b.setAttribute("aria-pressed", String(n.pressed));
  b.disabled = !!n.disabled;
  b.addEventListener("click", () => send(n.pressed === undefined ? { click: true } : { value: !n.pressed }));
  return b;
}

/** @param {Item} n @param {Send} send */
function toggles(n, send) {
  const group = make("span", "gvm-toggles");
  group.setAttribute("role", "group");
  n.options.forEach((label, i) => {
    const key = `${n.id}:${i}`;
    const b = button({ key, label, tooltip: (n.tooltips || [])[i], pressed: i === n.index }, () =>
      send({ index: i }),
    );
    group.appendChild(b);
  });
  return labelled(n, group);
}

/** @param {Item} n @param {Send} send */
function select(n, send) {
  const s = make("select", "gvm-select");
  s.dataset.gvmKey = String(n.id);
  n.options.forEach((label, i) => {
    const o = make("option", "", label);
    o.value = String(i);
    s.appendChild(o);
  });
  s.selectedIndex = n.index;
  s.disabled = !!n.disabled;
  s.addEventListener("change", () => send({ index: s.selectedIndex }));
  return labelled(n, s);
}

/** @param {Item} n @param {Send} send */
function number(n, send) {
  const input = make("input", "gvm-number");
  input.type = "number";
  input.step = "any";
  input.dataset.gvmKey = String(n.id);
  input.value = String(n.value);
  input.addEventListener("change", () => send({ value: input.value === "" ? null : Number(input.value) }));
  return labelled(n, input);
}

/** The element of one item (boxes drawn with their children).
 * @param {Item} n @param {{send: (msg: any) => void}} model @returns {HTMLElement} */
export function draw(n, model) {
  const send = (/** @type {Record<string, unknown>} */ extra) => model.send({ id: n.id, ...extra });
  let e;
  if (n.kind === "box") {
    e = make("div", n.row ? "gvm-row" : "gvm-col");
    n.children.forEach((c) => e.appendChild(draw(c, model)));
  } else if (n.kind === "html") {
    e = make("div", "gvm-html");
    e.innerHTML = n.html;
  } else if (n.kind === "button" || n.kind === "toggle") {
    e = button(n, send);
  } else if (n.kind === "toggles") {
    e = toggles(n, send);
  } else if (n.kind === "select") {
    e = select(n, send);
  } else {
    e = number(n, send);
  }
  if (n.hidden) e.hidden = true;
  return e;
}

/** @param {{model: any, el: HTMLElement}} ctx */
function render({ model, el }) {
  const root = make("div", "gvm");
  el.appendChild(root);
  // a redraw keeps the keyboard focus on the same control (Tab order survives a re-run)
  const redraw = () => {
    const focused = /** @type {Document | ShadowRoot} */ (root.getRootNode()).activeElement;
    const key = focused && root.contains(focused) ? /** @type {HTMLElement} */ (focused).dataset.gvmKey : undefined;
    root.replaceChildren(...model.get("tree").map((/** @type {Item} */ n) => draw(n, model)));
    if (key) /** @type {HTMLElement | null} */ (root.querySelector(`[data-gvm-key="${key}"]`))?.focus();
  };
  model.on("change:tree", redraw);
  model.on("change:revision", redraw);
  redraw();
  return () => {
    model.off("change:tree", redraw);
    model.off("change:revision", redraw);
  };
}

export default { render };
