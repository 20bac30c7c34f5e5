// @ts-check
/**
 * Entry point of the layout worker bundle. In a worker it answers
 * {id, dot} messages with {id, ok, svg, ms, retried} or {id, ok: false, message};
 * on the main thread (fallback) it is imported as a plain module.
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
