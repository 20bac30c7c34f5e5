// @ts-check
/**
 * DOT -> SVG with the WASM build of Graphviz (@viz-js/viz).
 *
 * Runs inside the layout worker (see layout_worker.js) and, as a fallback,
 * on the main thread. Known failure mode: once the WASM instance has hit a
 * runtime error ("table index is out of bounds", e.g. for labels that start
 * with a newline) a reused instance may keep failing, so every error drops
 * the instance and the layout is retried once on a fresh one.
 */
import { instance } from "@viz-js/viz";

/** Error raised when a graph cannot be laid out. */
export class LayoutError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = "LayoutError";
  }
}

const LABEL_START = /(\b(?:x|head|tail)?label\s*=\s*")((?:\\[nlr]|\s)+)/g;

/**
 * Remove line breaks at the very start of quoted label attributes.
 * Leading whitespace without a line break is kept as is.
 * @param {string} dot
 * @returns {string}
 */
export function sanitizeDot(dot) {
  return dot.replace(LABEL_START, (all, head, run) =>
    /\\[nlr]|[\r\n]/.test(run) ? head : all,
  );
}

/**
 * @typedef {{svg: string, ms: number, retried: boolean, warnings: string[]}} LayoutResult
 * @typedef {{render: (dot: string, opts: object) => {status: string, output?: string,
 *   errors: {level?: string, message: string}[]}}} VizLike
 */

/** One Graphviz instance, recreated after any failure. */
export class LayoutEngine {
  /**
   * @param {{createInstance?: () => Promise<VizLike>, engine?: string}} [options]
   */
  constructor(options = {}) {
    this.createInstance = options.createInstance ?? instance;
    this.engine = options.engine ?? "dot";
    /** @type {Promise<VizLike> | null} */
    this.viz = null;
    /** Number of instances created so far (for tests and diagnostics). */
    this.instances = 0;
  }

  /** @returns {Promise<VizLike>} */
  getInstance() {
    if (!this.viz) {
      this.instances += 1;
      this.viz = this.createInstance();
    }
    return this.viz;
  }

  /**
   * Lay out `dot` and return SVG text. Retries once on a fresh instance.
   * @param {string} dot
   * @returns {Promise<LayoutResult>}
   */
  async layout(dot) {
    const src = sanitizeDot(dot);
    const t0 = performance.now();
    let lastError = "layout failed";
    for (let attempt = 0; attempt < 2; attempt += 1) {
      try {
        const viz = await this.getInstance();
        const result = viz.render(src, { format: "svg", engine: this.engine });
        const messages = (result.errors ?? []).map((e) => e.message.trim());
        if (result.status === "success" && typeof result.output === "string") {
          return { svg: result.output, ms: performance.now() - t0, retried: attempt > 0, warnings: messages };
        }
        const errors = (result.errors ?? []).filter((e) => e.level !== "warning");
        lastError = (errors.length ? errors : result.errors ?? []).map((e) => e.message.trim()).join("; ")
          || "Graphviz reported a failure without a message";
      } catch (err) {
        lastError = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
      }
      this.viz = null; // never reuse an instance that failed
    }
    throw new LayoutError(lastError);
  }
}
