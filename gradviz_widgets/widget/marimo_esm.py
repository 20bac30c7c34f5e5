"""The front end of the marimo mirror (widget_marimo.Mirror): a small anywidget module that
draws ipywidgets controls from a plain description and sends each user change back.

Labels, options and tooltips are set as text (``textContent``, ``title``, ``aria-label``),
never as markup; only ``html`` items (the loss line, the compare notes, the hook readout, all
built escaped by the widget's own code) are set as HTML.
"""

ESM = r"""
function make(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function labelled(n, control) {
  const wrap = make("span", "gvm-field");
  control.setAttribute("aria-label", n.label || "");
  if (n.label) wrap.appendChild(make("span", "gvm-label", n.label));
  wrap.appendChild(control);
  return wrap;
}

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

function number(n, send) {
  const input = make("input", "gvm-number");
  input.type = "number";
  input.step = "any";
  input.dataset.gvmKey = String(n.id);
  input.value = String(n.value);
  input.addEventListener("change", () => send({ value: input.value === "" ? null : Number(input.value) }));
  return labelled(n, input);
}

function draw(n, model) {
  const send = (extra) => model.send({ id: n.id, ...extra });
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

function render({ model, el }) {
  const root = make("div", "gvm");
  el.appendChild(root);
  // a redraw keeps the keyboard focus on the same control (Tab order survives a re-run)
  const redraw = () => {
    const focused = root.getRootNode().activeElement;
    const key = focused && root.contains(focused) ? focused.dataset.gvmKey : undefined;
    root.replaceChildren(...model.get("tree").map((n) => draw(n, model)));
    if (key) root.querySelector(`[data-gvm-key="${key}"]`)?.focus();
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
"""

CSS = """
.gvm { font: 13px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: #222; }
.gvm-col { display: flex; flex-direction: column; gap: 4px; }
.gvm-row { display: flex; flex-flow: row wrap; align-items: center; gap: 6px 10px; }
.gvm-field { display: inline-flex; align-items: center; gap: 4px; }
.gvm-label { color: #444; }
.gvm-toggles { display: inline-flex; }
.gvm-toggles .gvm-button { border-radius: 0; }
.gvm-toggles .gvm-button:first-child { border-radius: 4px 0 0 4px; }
.gvm-toggles .gvm-button:last-child { border-radius: 0 4px 4px 0; }
.gvm-button, .gvm-select, .gvm-number {
  font: inherit; padding: 2px 8px; border: 1px solid #bbb; border-radius: 4px;
  background: #fff; color: #222; min-height: 26px;
}
.gvm-button { cursor: pointer; }
.gvm-button:hover { background: #f0f0f0; }
.gvm-button[aria-pressed="true"] { background: #dbe7f7; border-color: #6a8fc4; }
.gvm-primary { background: #2f6fc1; border-color: #2f6fc1; color: #fff; }
.gvm-primary:hover { background: #285fa6; }
.gvm-number { width: 90px; }
.gvm-html { max-width: 100%; overflow-x: auto; }
.gvm-html table { border-collapse: collapse; }
.gvm-html th, .gvm-html td { border-bottom: 1px solid #e3e3e3; padding: 1px 6px; text-align: right; }
"""
