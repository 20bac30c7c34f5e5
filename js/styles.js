// @ts-check
/**
 * CSS for the graph pane: the text of graph_pane.css, bundled by esbuild's text loader
 * (build.mjs). In a notebook anywidget injects the same file as GraphPane's `_css`; hosts
 * without it (the standalone page, page_host.js) get it from `injectStyles`.
 */
// @ts-ignore -- a .css import is text, resolved by esbuild (build.mjs), not by TypeScript
import CSS_TEXT from "./graph_pane.css";

/** @type {string} */
export const CSS = CSS_TEXT;

/**
 * Put a <style> element with the pane CSS into `root`.
 * @param {HTMLElement} root
 */
export function injectStyles(root) {
  const style = document.createElement("style");
  style.textContent = CSS;
  root.appendChild(style);
  return style;
}
