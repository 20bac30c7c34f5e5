// @ts-check
/**
 * Main-thread side of the layout: sends DOT to a Web Worker (so a large graph
 * never freezes the notebook, and a runaway layout can be stopped after a
 * timeout) and falls back to laying out on the main thread when workers are
 * unavailable. The worker's code is the layout_worker.js bundle, inlined by
 * build.mjs as gzip+base64 text, so Graphviz is shipped only once and small.
 */
import workerSourceGzipB64 from "gvw:layout-worker-source";

/** @typedef {{svg: string, ms: number, retried: boolean, warnings: string[], engine: string}} ClientResult */

export class LayoutClientError extends Error {
  /** @param {string} message @param {{timedOut?: boolean, superseded?: boolean}} [flags] */
  constructor(message, flags = {}) {
    super(message);
    this.name = "LayoutError";
    this.timedOut = Boolean(flags.timedOut);
    this.superseded = Boolean(flags.superseded);
  }
}

/** @type {Promise<string> | null} */
let sourcePromise = null;

/** The layout worker's JavaScript source (decompressed once). @returns {Promise<string>} */
export function workerSource() {
  if (!sourcePromise) {
    sourcePromise = (async () => {
      const bin = atob(workerSourceGzipB64);
      const bytes = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i += 1) bytes[i] = bin.charCodeAt(i);
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      return await new Response(stream).text();
    })();
  }
  return sourcePromise;
}

/** @type {Promise<any> | null} */
let inlineModule = null;

/** The worker bundle's exports on the main thread: the classic script evaluated (its
 *  `GvwLayout`), else loaded as a <script> from a blob: URL where eval is not allowed. */
export function importInlineModule() {
  if (!inlineModule) {
    inlineModule = (async () => {
      const source = await workerSource();
      try {
        return new Function(`${source}\nreturn GvwLayout;`)();
      } catch (err) {
        if (typeof document === "undefined") throw err;
        return await scriptExports(source);
      }
    })();
  }
  return inlineModule;
}

/** Run the classic bundle as a <script> element; resolves to the `GvwLayout` it defines. */
function scriptExports(/** @type {string} */ source) {
  const url = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
  return new Promise((resolve, reject) => {
    const script = document.createElement("script");
    script.src = url;
    script.onload = () => { URL.revokeObjectURL(url); script.remove(); resolve(/** @type {any} */ (globalThis).GvwLayout); };
    script.onerror = () => { URL.revokeObjectURL(url); script.remove(); reject(new Error("the layout engine could not be loaded")); };
    document.head.appendChild(script);
  });
}

export class LayoutClient {
  /** @param {{timeoutMs?: number, useWorker?: boolean}} [options] */
  constructor(options = {}) {
    this.timeoutMs = options.timeoutMs ?? 30000;
    this.useWorker = (options.useWorker ?? true) && typeof Worker !== "undefined";
    /** @type {Worker | null} */
    this.worker = null;
    this.workerUrl = "";
    this.workerWorked = false;
    this.nextId = 1;
    /** @type {((r: any) => void) | null} */
    this.cancelPending = null;
    /** @type {any} */
    this.inlineEngine = null;
  }

  /** Lay out `dot`; a call made while another is running cancels the older one. */
  async layout(/** @type {string} */ dot) {
    this.cancel();
    if (this.useWorker) {
      try {
        return await this.layoutInWorker(dot);
      } catch (err) {
        if (!(err instanceof WorkerUnavailable)) throw err;
        this.useWorker = false;
      }
    }
    if (!this.inlineEngine) this.inlineEngine = new (await importInlineModule()).LayoutEngine();
    try {
      const r = await this.inlineEngine.layout(dot);
      return { ...r, engine: "inline" };
    } catch (err) {
      throw new LayoutClientError(err instanceof Error ? err.message : String(err));
    }
  }

  /** @param {string} dot @returns {Promise<ClientResult>} */
  async layoutInWorker(dot) {
    const source = await workerSource();
    this.cancel(); // a newer call may have started while decompressing
    if (!this.worker) {
      try {
        this.workerUrl = URL.createObjectURL(new Blob([source], { type: "text/javascript" }));
        this.worker = new Worker(this.workerUrl, { name: "gradviz-layout" }); // classic: see build.mjs
      } catch (err) {
        throw new WorkerUnavailable(String(err));
      }
    }
    const worker = this.worker;
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        finish();
        const started = this.workerWorked;
        this.stopWorker();
        if (!started) {
          reject(new WorkerUnavailable("worker did not start"));
          return;
        }
        reject(new LayoutClientError(
          `Layout did not finish within ${Math.round(this.timeoutMs / 1000)} s; ` +
            "the graph is too large to lay out interactively (collapse modules to shrink it)",
          { timedOut: true },
        ));
      }, this.timeoutMs);
      const finish = () => {
        clearTimeout(timer);
        worker.removeEventListener("message", onMessage);
        worker.removeEventListener("error", onError);
        this.cancelPending = null;
      };
      const onMessage = (/** @type {MessageEvent} */ ev) => {
        const data = ev.data ?? {};
        if (data.ready) { this.workerWorked = true; return; }
        if (data.id !== id) return;
        finish();
        this.workerWorked = true;
        if (data.ok) resolve({ svg: data.svg, ms: data.ms, retried: data.retried, warnings: data.warnings ?? [], engine: "worker" });
        else reject(new LayoutClientError(data.message || "layout failed"));
      };
      const onError = (/** @type {ErrorEvent} */ ev) => {
        ev.preventDefault?.();
        finish();
        const working = this.workerWorked;
        this.stopWorker();
        if (working) reject(new LayoutClientError(`layout worker crashed: ${ev.message || "unknown error"}`));
        else reject(new WorkerUnavailable(ev.message || "worker failed to start"));
      };
      this.cancelPending = () => { finish(); this.stopWorker(); reject(new LayoutClientError("superseded", { superseded: true })); };
      worker.addEventListener("message", onMessage);
      worker.addEventListener("error", onError);
      worker.postMessage({ id, dot });
    });
  }

  /** Abandon the running layout (if any); its promise rejects with "superseded". */
  cancel() {
    if (this.cancelPending) this.cancelPending();
  }

  stopWorker() {
    if (this.worker) this.worker.terminate();
    if (this.workerUrl) URL.revokeObjectURL(this.workerUrl);
    this.worker = null;
    this.workerUrl = "";
    this.workerWorked = false;
  }

  dispose() {
    this.cancel();
    this.stopWorker();
    this.inlineEngine = null;
  }
}

class WorkerUnavailable extends Error {}
