"""Benchmark gradviz_widgets on the example model zoo and write docs/benchmarks.md + .json.

    python -m benchmarks.run                  # full zoo on CPU (about 15 min on 2 cores)
    python -m benchmarks.run --smoke          # tiny zoo, 1 repeat, caps of a few seconds (< 60 s)
    python -m benchmarks.run --device cuda    # the same table on a GPU
    python -m benchmarks.run --models resnet50,gpt2_like --out-dir out/bench

Per model, in one process and in alternation (bare, ex.run(), ex.run() with hooks, rotated each
repeat so no mode always goes first): medians of the wall time of

* bare: forward + `out.sum().backward()` with `.grad` set to None first (the floor);
* run: `GradExplorer(model, x).run()` (capture, graph, norms, per-edge flow);
* hooks: `ex.run()` with a backward hook on every module but the root;

then the fused gradient norms (gradviz_widgets.stats.norms.NormBatch: one host sync) against a
`[g.norm().item() for g in grads]` loop; the graph sizes; the time from the finished run to DOT
text (widget default view: `auto_depth(120)`, and the full graph); the layout of that DOT with
Graphviz-WASM in node (benchmarks/layout_wasm.mjs, @viz-js/viz as the widget uses it) and with the
native `dot`; `torchviz.make_dot` + `dot -Tsvg` on the same loss, capped; and the peak memory of
each mode, each in a fresh child process (benchmarks/memory.py).

Then, once per suite (benchmarks/accuracy.py): the norm accuracy vs cost table (float32 and
float64 `vector_norm` against our NormBatch at 1M / 25M / 100M elements; smoke: 1M) and the
run overhead on a 1,000-layer Linear chain (smoke: 100 layers).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.accuracy import chain_row, norm_accuracy  # noqa: E402
from benchmarks.common import MODES, ROOT, to_dot_function  # noqa: E402
from benchmarks.graphs import native_layout, time_dot, torchviz_time, wasm_layout  # noqa: E402
from benchmarks.memory_runs import memory, memory_columns  # noqa: E402
from benchmarks.report_md import analysis_text, markdown  # noqa: E402
from benchmarks.stages import MODELS as STAGE_MODELS  # noqa: E402
from benchmarks.stages import run_stages  # noqa: E402
from benchmarks.targets import COLUMNS, STATUS_COLUMNS, evaluate_targets  # noqa: E402
from benchmarks.timing import time_modes  # noqa: E402
from benchmarks.util import log  # noqa: E402


# ---- one model -------------------------------------------------------------------------------
def bench_model(name: str, args: argparse.Namespace, to_dot: Any, workdir: Path) -> dict[str, Any]:
    log(f"{name}: timing bare / ex.run() / hooks x{args.repeats}")
    timed = time_modes(name, args.size, args.device, args.repeats, args.warmup, args.model_budget)
    row = timed["row"]
    log(
        f"  bare {row['bare_ms']:.1f} ms, run x{row['run_ratio']:.3f}, "
        f"hooks x{row['hooks_ratio']:.3f}"
    )
    dot_row, dot_default, dot_full = time_dot(timed["explorer"], to_dot, 3)
    row.update(dot_row)
    mdir = workdir / name
    mdir.mkdir(parents=True, exist_ok=True)
    paths = {"default": mdir / "default.dot", "full": mdir / "full.dot"}
    paths["default"].write_text(dot_default)
    paths["full"].write_text(dot_full)
    row["raw"]["layout"] = {}
    for which, path in paths.items():
        cap = args.layout_cap
        ms, status, details = wasm_layout(path, cap, 3)
        row[f"wasm_{which}_ms"], row[f"wasm_{which}_ms_status"] = ms, status
        row["raw"]["layout"][f"wasm_{which}"] = details
        nms, nstatus = native_layout(path, cap, 3)
        row[f"native_{which}_ms"], row[f"native_{which}_ms_status"] = nms, nstatus
        row[f"run_to_svg_{which}_ms"] = None if ms is None else row[f"dot_{which}_ms"] + ms
        log(
            f"  {which} view: {row['nodes_' + which]} nodes, DOT {row['dot_' + which + '_ms']:.1f}"
            f" ms, WASM {status if ms is None else f'{ms:.0f} ms'}, "
            f"dot {nstatus if nms is None else f'{nms:.0f} ms'}"
        )
    row.update(torchviz_time(timed["model"], timed["x"], args.torchviz_cap, mdir))
    log(f"  torchviz: {row['torchviz_ms_status']} {row['torchviz_ms']}")
    return row


# ---- main -------------------------------------------------------------------------------------
def tool_versions() -> dict[str, str]:
    info = {}
    dot = shutil.which("dot")
    if dot:
        done = subprocess.run([dot, "-V"], capture_output=True, text=True)
        info["dot"] = (done.stderr or done.stdout).strip()
    else:
        info["dot"] = "native dot not installed"
    node = shutil.which("node")
    info["node"] = (
        subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip()
        if node
        else "not installed"
    )
    return info


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="tiny zoo, 1 repeat, caps of a few seconds; writes to out/benchmarks_smoke",
    )
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")
    ap.add_argument("--models", default=None, help="comma-separated zoo names (default: all)")
    ap.add_argument("--size", choices=("full", "tiny"), default=None)
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per mode (default 5)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up runs per mode (default 1)")
    ap.add_argument(
        "--torchviz-cap",
        type=float,
        default=None,
        help="seconds for torchviz.make_dot + dot -Tsvg (default 120)",
    )
    ap.add_argument(
        "--layout-cap",
        type=float,
        default=None,
        help="seconds for one layout of our DOT (default 60)",
    )
    ap.add_argument(
        "--model-budget",
        type=float,
        default=None,
        help="seconds of timing per model after which repeats stop at 3 (default 150)",
    )
    ap.add_argument("--no-memory", action="store_true", help="skip the memory child processes")
    ap.add_argument(
        "--accuracy-sizes",
        default=None,
        help="elements of the norm accuracy table, comma-separated "
        "(default 1000000,25000000,100000000; smoke: 1000000)",
    )
    ap.add_argument(
        "--chain-layers",
        type=int,
        default=None,
        help="depth of the Linear chain row (default 1000; smoke: 100)",
    )
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    ap.add_argument(
        "--render-only",
        action="store_true",
        help="re-write benchmarks.md from the benchmarks.json in --out-dir (no runs)",
    )
    ap.add_argument(
        "--out-dir", default=None, help="where benchmarks.md / benchmarks.json go (default docs/)"
    )
    args = ap.parse_args(argv)
    smoke = args.smoke
    args.size = args.size or ("tiny" if smoke else "full")
    args.repeats = args.repeats or (1 if smoke else 5)
    args.warmup = args.warmup if args.warmup is not None else 1
    args.torchviz_cap = args.torchviz_cap or (5.0 if smoke else 120.0)
    args.layout_cap = args.layout_cap or (5.0 if smoke else 60.0)
    args.model_budget = args.model_budget or (10.0 if smoke else 150.0)
    args.accuracy_sizes = [
        int(v)
        for v in (
            args.accuracy_sizes or ("1000000" if smoke else "1000000,25000000,100000000")
        ).split(",")
    ]
    args.chain_layers = args.chain_layers or (100 if smoke else 1000)
    args.out_dir = Path(
        args.out_dir or (ROOT / "out" / "benchmarks_smoke" if smoke else ROOT / "docs")
    )
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render_only:
        result = json.loads((args.out_dir / "benchmarks.json").read_text())
        if result["meta"]["size"] == "full":
            result["analysis"] = analysis_text()
        (args.out_dir / "benchmarks.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out_dir / "benchmarks.md").write_text(markdown(result))
        return 0
    started = time.perf_counter()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("--device cuda: CUDA is not available here", file=sys.stderr)
        return 2
    from gradviz_widgets.examples import ZOO_NAMES

    names = list(ZOO_NAMES) if args.models is None else args.models.split(",")
    to_dot, to_dot_name = to_dot_function()
    load_start = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    rows: dict[str, dict] = {}
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="gradviz_bench_") as tmp:
        for name in names:
            try:
                rows[name] = bench_model(name, args, to_dot, Path(tmp))
            except Exception as e:  # keep going; the table says what failed
                import traceback

                traceback.print_exc()
                errors.append(f"{name}: {type(e).__name__}: {e}")
            gc.collect()
    log(f"norm accuracy vs cost at {args.accuracy_sizes} elements")
    accuracy = norm_accuracy(args.accuracy_sizes, args.device, 1 if args.smoke else 5)
    log(f"{args.chain_layers}-layer Linear chain: bare vs ex.run()")
    chain = chain_row(args.chain_layers, args.device, args.repeats)
    log(f"  bare {chain['bare_ms']:.1f} ms, run x{chain['run_ratio']:.2f}")
    stage_names = ["seed"] if args.smoke else list(STAGE_MODELS)
    # one thread, as `python -m benchmarks.stages` measures it: the table the analysis quotes
    stages = run_stages(stage_names, args.repeats, "python -m benchmarks.run, its stage part")
    if not args.no_memory:
        log("memory: fresh child process per " + ("mode" if args.smoke else "model and mode"))
        mem = memory(
            names,
            args.size,
            args.device,
            per_model=not args.smoke,
            threads=args.threads,
            timeout=60 if args.smoke else 900,
        )
    else:
        mem = {m: {n: {"model": n, "error": "skipped (--no-memory)"} for n in names} for m in MODES}
    for name, row in rows.items():
        row.update(memory_columns(mem, name))
        for col in COLUMNS:
            row.setdefault(col, None)
        for col in STATUS_COLUMNS:
            row.setdefault(f"{col}_status", "ok" if row[col] is not None else "n/a")
    viz = next(
        (
            r["raw"]["layout"]["wasm_default"]
            for r in rows.values()
            if r["raw"]["layout"].get("wasm_default")
        ),
        {},
    )
    meta = {
        "command": "python -m benchmarks.run" + ("" if argv is None else " " + " ".join(argv)),
        "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}",
        "torch": torch.__version__,
        "device": args.device,
        "threads": torch.get_num_threads(),
        "size": args.size,
        "repeats": args.repeats,
        "warmup": args.warmup,
        "torchviz_cap_s": args.torchviz_cap,
        "layout_cap_s": args.layout_cap,
        "to_dot": to_dot_name,
        "load_start": load_start,
        "load_end": ", ".join(f"{x:.2f}" for x in os.getloadavg()),
        "viz_version": viz.get("viz_version"),
        "graphviz_wasm_version": viz.get("graphviz_version"),
        "elapsed_s": time.perf_counter() - started,
        "smoke": args.smoke,
        **tool_versions(),
    }
    if argv is None:
        meta["command"] = "python -m benchmarks.run " + " ".join(sys.argv[1:])
    meta["command"] = meta["command"].strip()
    targets = evaluate_targets(rows, args.size)
    result = {
        "meta": meta,
        "columns": list(COLUMNS),
        "models": rows,
        "targets": targets,
        "norm_accuracy": accuracy,
        "chain": chain,
        "stages": stages,
        "errors": errors,
        "analysis": analysis_text() if args.size == "full" else "",
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    result = _kept_sections(args.out_dir / "benchmarks.json", result)
    (args.out_dir / "benchmarks.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (args.out_dir / "benchmarks.md").write_text(markdown(result))
    log(f"wrote {args.out_dir / 'benchmarks.md'} and benchmarks.json in {meta['elapsed_s']:.0f} s")
    return 1 if errors else 0


def _kept_sections(path: Path, result: dict) -> dict:
    """`result` plus the sections of the previous benchmarks.json that the suite does not write
    (those of separate benchmarks, e.g. the browser's click latency), so a suite run keeps them."""
    if not path.exists():
        return result
    try:
        previous = json.loads(path.read_text())
    except ValueError:
        return result
    return {**{k: v for k, v in previous.items() if k not in result}, **result}


if __name__ == "__main__":
    sys.exit(main())
