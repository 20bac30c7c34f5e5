// The marimo mirror's front end (marimo_mirror.js) on a tiny DOM: what each item draws, that
// user text stays text, and the change each control sends back.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

/** Just enough of a DOM for marimo_mirror.js: elements with children, attributes, events. */
class FakeElement {
  constructor(/** @type {string} */ tag) {
    this.tagName = tag.toUpperCase();
    /** @type {FakeElement[]} */
    this.children = [];
    /** @type {Record<string, string>} */
    this.attrs = {};
    /** @type {Record<string, Function[]>} */
    this.handlers = {};
    this.dataset = /** @type {Record<string, string>} */ ({});
    this.className = "";
    this.textContent = "";
    this.innerHTML = "";
    this.hidden = false;
    this.disabled = false;
    this.value = "";
    this.selectedIndex = -1;
  }
  appendChild(/** @type {FakeElement} */ c) { this.children.push(c); return c; }
  setAttribute(/** @type {string} */ k, /** @type {string} */ v) { this.attrs[k] = String(v); }
  addEventListener(/** @type {string} */ ev, /** @type {Function} */ fn) { (this.handlers[ev] ??= []).push(fn); }
  fire(/** @type {string} */ ev) { for (const fn of this.handlers[ev] ?? []) fn(); }
}
globalThis.document = /** @type {any} */ ({ createElement: (/** @type {string} */ t) => new FakeElement(t) });
const { draw } = await import("../marimo_mirror.js");

const sent = /** @type {any[]} */ ([]);
const model = { send: (/** @type {any} */ m) => sent.push(m) };

test("a box draws its children; a button sends a click, a toggle the other value", () => {
  sent.length = 0;
  const e = draw({ id: -1, kind: "box", row: true, children: [
    { id: 0, kind: "button", label: "Run", primary: true, tooltip: "run again" },
    { id: 1, kind: "toggle", label: "Compare", pressed: false },
  ] }, model);
  assert.equal(e.className, "gvm-row");
  const [run, cmp] = e.children;
  assert.equal(run.className, "gvm-button gvm-primary");
  assert.equal(run.title, "run again");
  run.fire("click");
  cmp.fire("click");
  assert.deepEqual(sent, [{ id: 0, click: true }, { id: 1, value: true }]);
  assert.equal(cmp.attrs["aria-pressed"], "false");
});

test("labels and options are text, never markup; only html items are HTML", () => {
  sent.length = 0;
  const hostile = "<img src=x onerror=alert(1)>";
  const menu = draw({ id: 3, kind: "select", label: hostile, options: [hostile, "b"], index: 1 }, model);
  assert.equal(menu.children[0].textContent, hostile);
  const select = menu.children[1];
  assert.equal(select.attrs["aria-label"], hostile);
  assert.deepEqual(select.children.map((/** @type {any} */ o) => [o.textContent, o.innerHTML]), [[hostile, ""], ["b", ""]]);
  assert.equal(select.selectedIndex, 1);
  select.selectedIndex = 0;
  select.fire("change");
  assert.deepEqual(sent, [{ id: 3, index: 0 }]);
  assert.equal(draw({ id: 4, kind: "html", html: "<b>loss</b>" }, model).innerHTML, "<b>loss</b>");
  const source = readFileSync(fileURLToPath(new URL("../marimo_mirror.js", import.meta.url)), "utf8");
  assert.equal(source.match(/innerHTML/g)?.length, 1);
});

test("toggle buttons send the index; a number field sends a number or null; hidden stays hidden", () => {
  sent.length = 0;
  const group = draw({ id: 5, kind: "toggles", label: "mode", options: ["a", "b"], index: 0, tooltips: ["A", "B"] }, model);
  const [a, b] = group.children[1].children;
  assert.equal(a.attrs["aria-pressed"], "true");
  assert.equal(b.title, "B");
  b.fire("click");
  const field = draw({ id: 6, kind: "number", label: "vanishing <", value: 1e-7, hidden: true }, model);
  assert.equal(field.hidden, true);
  const input = field.children[1];
  input.value = "0.5";
  input.fire("change");
  input.value = "";
  input.fire("change");
  assert.deepEqual(sent, [{ id: 5, index: 1 }, { id: 6, value: 0.5 }, { id: 6, value: null }]);
});
