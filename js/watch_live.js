// @ts-check
/**
 * The sizer of GradWatch's live view (gradviz_widgets/watch/widget.py, `LiveSizer`): an
 * invisible anywidget in the view's box that keeps its Plotly figures as wide as the box.
 *
 * Plotly's FigureWidget (an anywidget) draws when it is rendered, before JupyterLab puts it in
 * the page: with no width to measure, Plotly falls back to its default 700 px and, as an
 * anywidget, never gets the message that would resize it. This module watches the box with a
 * ResizeObserver (it fires once the box is in the page and has a width, and on every later
 * change of width: the window, the side panel) and asks each figure drawn at another width to
 * fit it, through the handler Plotly installs for `config.responsive` (the live figures set it).
 * Bundled by build.mjs into static/watch_live.js, which anywidget loads.
 */

import { closestAcross } from "./dom.js";

/** the class of the live view's box (WatchWidget.box) */
export const BOX_CLASS = "gvw-watch-live";

/**
 * The Plotly figures (graph divs) of `box` drawn at a width other than the one they have now.
 * @param {Element} box @returns {any[]}
 */
export function misfits(box) {
  /** @type {any[]} */
  const plots = [...box.querySelectorAll(".js-plotly-plot")];
  return plots.filter((gd) => {
    const drawn = gd._fullLayout?.width;
    const width = gd.clientWidth;
    return width > 0 && typeof drawn === "number" && Math.abs(drawn - width) > 1;
  });
}

/**
 * Ask each figure of `box` drawn at another width to fit its box (Plotly's Plots.resize through
 * its responsive handler; without one, a window resize event, which reaches the same handler).
 * Returns how many were asked.
 * @param {Element} box @returns {number}
 */
export function fitPlots(box) {
  // a figure Plotly could not fit is asked again at most 3 times for the same width (a resize
  // that raced a draw), never in a loop
  const wrong = misfits(box).filter((gd) => {
    const asked = gd.__gvwAsked?.width === gd.clientWidth ? gd.__gvwAsked.times : 0;
    gd.__gvwAsked = { width: gd.clientWidth, times: asked + 1 };
    return asked < 3;
  });
  let dispatched = false;
  for (const gd of wrong) {
    // Python never sets a width: one in the graph's layout is Plotly's 700 px fallback, kept
    // as if the user had fixed it (Plotly then never resizes a figure whose height is set too)
    if (gd.layout && typeof gd.layout.width === "number") {
      delete gd.layout.width;
      gd.layout.autosize = true;
    }
    if (typeof gd._responsiveChartHandler === "function") gd._responsiveChartHandler();
    else if (!dispatched) {
      dispatched = true;
      window.dispatchEvent(new Event("resize"));
    }
  }
  return wrong.length;
}

/**
 * Watch the live view's box that holds `el`: fit its figures whenever its size changes (first
 * once it is in the page). The box is looked for again until found (`el` may be rendered before
 * the box puts it in place). Returns what stops watching.
 * @param {HTMLElement} el @returns {() => void}
 */
export function watchBox(el) {
  /** @type {Element | null} */
  let box = null;
  /** @type {ReturnType<typeof setTimeout> | null} */
  let timer = null;
  const fit = () => {
    if (timer !== null) clearTimeout(timer);
    // Plotly may still be drawing a figure rendered in the same frame: fit once it is drawn
    timer = setTimeout(() => {
      timer = null;
      if (box) fitPlots(box);
    }, 50);
  };
  const observer = new ResizeObserver(() => {
    if (!box) {
      box = closestAcross(el, `.${BOX_CLASS}`);
      if (box) {
        observer.observe(box);
        for (const gd of box.querySelectorAll(".js-plotly-plot")) {
          observer.observe(gd);
          // every draw (a redraw from Python may come while a resize waits): check again
          /** @type {any} */ (gd).on?.("plotly_afterplot", fit);
        }
      }
    }
    fit();
  });
  observer.observe(el);
  return () => {
    observer.disconnect();
    if (timer !== null) clearTimeout(timer);
  };
}

/** @param {{el: HTMLElement}} ctx */
function render({ el }) {
  el.style.display = "block";
  el.style.height = "0";
  return watchBox(el);
}

export default { render };
