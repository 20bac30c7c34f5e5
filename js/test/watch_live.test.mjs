// The live watch view's sizer (watch_live.js): figures Plotly drew at its 700 px fallback are
// asked to fit their box, with the fallback width dropped from their layout, and never in a loop.
import assert from "node:assert/strict";
import { test } from "node:test";
import { fitPlots, misfits } from "../watch_live.js";

/** a Plotly graph div as the sizer sees it */
function plot(/** @type {number} */ drawn, /** @type {number} */ client, /** @type {any} */ layout) {
  const gd = { _fullLayout: { width: drawn }, clientWidth: client, layout, calls: 0 };
  return Object.assign(gd, { _responsiveChartHandler: () => { gd.calls += 1; } });
}
const box = (/** @type {any[]} */ plots) => /** @type {any} */ ({ querySelectorAll: () => plots });

test("only figures drawn at another width than their box are misfits", () => {
  const fitted = plot(848, 848, {}), wide = plot(700, 848, {}), hidden = plot(700, 0, {});
  assert.deepEqual(misfits(box([fitted, wide, hidden])), [wide]);
});

test("a misfit loses Plotly's fallback width and is resized", () => {
  const heat = plot(700, 848, { width: 700, height: 300, autosize: false });
  assert.equal(fitPlots(box([heat])), 1);
  assert.equal(heat.calls, 1);
  assert.equal("width" in heat.layout, false);
  assert.equal(heat.layout.autosize, true);
  assert.equal(heat.layout.height, 300); // the height Python set stays
});

test("a figure that will not fit is asked three times per width, then left", () => {
  const stuck = plot(700, 848, {});
  const asked = [1, 2, 3, 4, 5].map(() => fitPlots(box([stuck])));
  assert.deepEqual(asked, [1, 1, 1, 0, 0]);
  stuck.clientWidth = 1000; // a new width: asked again
  assert.equal(fitPlots(box([stuck])), 1);
});
