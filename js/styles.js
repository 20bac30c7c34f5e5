// @ts-check
/**
 * CSS for the graph pane, injected into the widget root (all rules scoped to .gvw-pane).
 * The status line is one row high whatever its text (ellipsis; the full text is its title),
 * and `width: 0; min-width: 100%` keeps a long text from widening the pane: nothing moves.
 */

export const CSS = `
.gvw-pane { display: flex; flex-direction: column; gap: 4px; font: 12px/1.4 var(--jp-ui-font-family, system-ui, sans-serif);
  color: var(--jp-ui-font-color1, #222); min-width: 0; }
.gvw-pane [hidden] { display: none !important; }
.gvw-toolbar { display: flex; align-items: center; gap: 4px; flex-wrap: wrap; }
.gvw-toolbar button { font: inherit; min-width: 26px; height: 24px; padding: 0 6px; border: 1px solid var(--jp-border-color1, #bbb);
  border-radius: 3px; background: var(--jp-layout-color1, #fff); color: inherit; cursor: pointer; }
.gvw-toolbar button:hover { background: var(--jp-layout-color2, #eee); }
.gvw-toolbar .gvw-spacer { flex: 1; }
.gvw-search { font: inherit; height: 22px; width: 200px; padding: 0 6px; border: 1px solid var(--jp-border-color1, #bbb);
  border-radius: 3px; background: var(--jp-layout-color1, #fff); color: inherit; }
.gvw-search.gvw-no-match { border-color: #d33; background: #fff0f0; }
.gvw-count { min-width: 3em; color: var(--jp-ui-font-color2, #666); }
.gvw-status { box-sizing: border-box; height: 1.6em; line-height: 1.4em; padding: 1px 6px; border-radius: 3px;
  white-space: nowrap; overflow: hidden; text-overflow: ellipsis; flex: 0 0 auto; width: 0; min-width: 100%; }
.gvw-legend { min-height: 18px; }
.gvw-status[data-level="busy"] { color: #555; background: #eef3ff; }
.gvw-status[data-level="busy"]::before { content: "\\23F3  "; }
.gvw-status[data-level="warning"] { color: #7a4b00; background: #fff6dd; }
.gvw-status[data-level="error"] { color: #b00020; background: #fde8ea; font-weight: 600; }
.gvw-legend { display: flex; flex-wrap: wrap; gap: 10px; align-items: center; }
.gvw-legend-item { display: inline-flex; align-items: center; gap: 4px; }
.gvw-viewport { position: relative; height: 480px; min-height: 120px; resize: vertical; overflow: hidden;
  border: 1px solid var(--jp-border-color2, #ddd); border-radius: 3px; background: #fff; cursor: grab;
  touch-action: none; user-select: none; }
.gvw-viewport.gvw-dragging { cursor: grabbing; }
.gvw-viewport > svg { display: block; position: absolute; left: 0; top: 0; transform-origin: 0 0;
  max-width: none; max-height: none; }
.gvw-viewport.gvw-moving > svg { will-change: transform; }
.gvw-hint { position: absolute; left: 6px; bottom: 6px; z-index: 5; padding: 2px 6px; border-radius: 3px;
  background: rgba(255,255,255,0.92); border: 1px solid #ccc; color: #444; font-size: 11px; pointer-events: none; }
.gvw-empty { position: absolute; inset: 0; display: flex; align-items: center; justify-content: center; color: #888; }
.gvw-pane g.node { cursor: pointer; outline: none; }
.gvw-pane g.node:focus-visible :is(polygon, ellipse, path, rect) { stroke: #1f6feb; stroke-width: 4px; stroke-dasharray: 3 2; }
.gvw-pane g.node:focus-visible { filter: drop-shadow(0 0 3px #1f6feb); }
.gvw-toolbar button:focus-visible, .gvw-search:focus-visible { outline: 2px solid #1f6feb; outline-offset: 1px; }
.gvw-pane g.cluster > text { cursor: pointer; }
.gvw-pane g.node.hooked :is(polygon, ellipse, path, rect) { stroke-width: 3.5px; }
.gvw-pane .gvw-hook-badge { fill: #333; stroke: #fff; stroke-width: 1px; pointer-events: none; }
.gvw-pane g.node.gvw-match :is(polygon, ellipse, path, rect) { stroke: #c026d3; stroke-width: 3px; }
.gvw-pane g.node.gvw-current :is(polygon, ellipse, path, rect) { stroke: #c026d3; stroke-width: 5px; }
.gvw-pane g.node.gvw-highlight { filter: drop-shadow(0 0 4px #f59e0b) drop-shadow(0 0 2px #f59e0b); }
.gvw-pane g.node.gvw-highlight :is(polygon, ellipse, path, rect) { stroke: #d97706; stroke-width: 4px; }
.gvw-pane g.node.gvw-selected :is(polygon, ellipse, path, rect) { stroke: #1f6feb; stroke-width: 4px; }
.gvw-pane.gvw-has-highlight g.node:not(.gvw-highlight), .gvw-pane.gvw-has-highlight g.edge { opacity: 0.45; }
.gvw-tooltip { position: absolute; z-index: 10; max-width: 360px; padding: 6px 8px; pointer-events: none;
  background: rgba(255,255,255,0.97); color: #222; border: 1px solid #aaa; border-radius: 4px;
  box-shadow: 0 2px 8px rgba(0,0,0,0.2); font-size: 12px; }
.gvw-tooltip-title { font-weight: 600; margin-bottom: 3px; overflow-wrap: anywhere; }
.gvw-tooltip table { border-collapse: collapse; }
.gvw-tooltip td { padding: 0 8px 0 0; vertical-align: top; overflow-wrap: anywhere; }
.gvw-tooltip td:first-child { color: #666; white-space: nowrap; }
`;

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
