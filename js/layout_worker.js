// @ts-check
/**
 * Entry point of the layout worker bundle. In a worker it answers
 * {id, dot} messages with {id, ok, svg, ms, retried} or {id, ok: false, message};
 * on the main thread (fallback) the same classic script is evaluated and its `GvwLayout` read
 * (js/build.mjs bundles it as an IIFE: Chromium refuses module workers from blob: URLs on
 * file:// pages).
 */
import { LayoutEngine, LayoutError, sanitizeDot } from "./layout_core.js";

export { LayoutEngine, LayoutError, sanitizeDot };

const inWorker =
  typeof self !== "undefined" &&
  typeof (/** @type {any} */ (globalThis).WorkerGlobalScope) !== "undefined" &&
  self instanceof /** @type {any} */ (globalThis).WorkerGlobalScope;

if (inWorker) {
  const engine = new LayoutEngine();
  const scope = /** @type {any} */ (self);
  scope.onmessage = async (/** @type {MessageEvent} */ event) => {
    const { id, dot } = event.data ?? {};
    try {
      const result = await engine.layout(String(dot ?? ""));
      scope.postMessage({ id, ok: true, ...result });
    } catch (err) {
      scope.postMessage({ id, ok: false, message: err instanceof Error ? err.message : String(err) });
    }
  };
  scope.postMessage({ ready: true });
}
