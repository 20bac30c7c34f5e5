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

then the fused gradient norms (gradviz_widgets.stats.NormBatch: one host sync) against a
`[g.norm().item() for g in grads]` loop; the graph sizes; the time from the finished run to DOT
text (widget default view: `auto_depth(120)`, and the full graph); the layout of that DOT with
Graphviz-WASM in node (benchmarks/layout_wasm.mjs, @viz-js/viz as the widget uses it) and with the
native `dot`; `torchviz.make_dot` + `dot -Tsvg` on the same loss, capped; and the peak memory of
each mode, each in a fresh child process (benchmarks/memory.py).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python benchmarks/run.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common import (  # noqa: E402
    MODES,
    ROOT,
    build,
    clear_grads,
    default_view,
    mode_step,
    sync,
    to_dot_function,
)

HERE = Path(__file__).resolve().parent
LAYOUT_JS = HERE / "layout_wasm.mjs"

#: every key each model row has (value None where a measurement was capped or unavailable; the
#: matching `<key>_status` then says why).
COLUMNS: tuple[str, ...] = (
    "description", "params",
    "bare_ms", "run_ms", "run_ratio", "run_cpu_ratio", "hooks_ms", "hooks_ratio",
    "hooks_cpu_ratio", "hooked_modules", "repeats_done", "host_syncs", "host_syncs_hooks",
    "norms_n", "norms_fused_ms", "norms_loop_ms", "norms_fused_syncs", "norms_loop_syncs",
    "nodes_full", "edges_full", "default_depth", "nodes_default", "edges_default",
    "dot_default_ms", "dot_full_ms",
    "wasm_default_ms", "run_to_svg_default_ms", "native_default_ms",
    "wasm_full_ms", "run_to_svg_full_ms", "native_full_ms",
    "torchviz_nodes", "torchviz_ms",
    "mem_bare_peak_mib", "mem_run_peak_mib", "mem_hooks_peak_mib",
    "mem_bare_delta_mib", "mem_run_delta_mib", "mem_hooks_delta_mib",
    "mem_run_ratio", "mem_run_delta_ratio", "mem_hooks_ratio",
)
#: columns that may be capped / unavailable and carry a `<key>_status`
STATUS_COLUMNS = ("wasm_default_ms", "native_default_ms", "wasm_full_ms", "native_full_ms",
                  "torchviz_ms", "mem_run_ratio")

TARGETS = {
    "run_ratio": 1.15,  # ex.run() vs bare, ResNet-50 and GPT-2-shaped
    "hooks_ratio": 1.5,  # hooks on every module vs bare
    "host_syncs": 1,
    "run_to_svg_default_s": 1.0,  # every zoo model
    "run_to_svg_full_resnet50_s": 2.0,
    "mem_ratio": 1.1,
}


# ---- small helpers ----------------------------------------------------------------------------
def median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def cap_text(seconds: float) -> str:
    return f"did not finish in {seconds:g} s"


# ---- timing of the three modes ---------------------------------------------------------------
def time_modes(name: str, size: str, device: str, repeats: int, warmup: int,
               budget_s: float = math.inf) -> dict[str, Any]:
    """Medians over `repeats` alternations of the three modes; once `budget_s` is spent, stop
    after the third repeat (a slow mode must not eat the whole suite's time)."""
    model, x, description = build(name, size, device)
    steps, explorers = {}, {}
    for mode in MODES:
        steps[mode], explorers[mode] = mode_step(mode, model, x, device)
    for _ in range(warmup):
        for mode in MODES:
            steps[mode]()
    wall: dict[str, list[float]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    started = time.perf_counter()
    for r in range(repeats):
        if r >= min(3, repeats) and time.perf_counter() - started > budget_s:
            break
        order = MODES[r % len(MODES):] + MODES[: r % len(MODES)]
        for mode in order:
            clear_grads(model)
            gc.collect()
            sync(device)
            c0, t0 = time.process_time(), time.perf_counter()
            steps[mode]()
            wall[mode].append(time.perf_counter() - t0)
            cpu[mode].append(time.process_time() - c0)
    med = {m: median(wall[m]) for m in MODES}
    cmed = {m: median(cpu[m]) for m in MODES}
    ex, exh = explorers["run"], explorers["hooks"]
    row = {
        "description": description,
        "params": sum(p.numel() for p in model.parameters()),
        "bare_ms": med["bare"] * 1e3,
        "run_ms": med["run"] * 1e3,
        "hooks_ms": med["hooks"] * 1e3,
        "run_ratio": ratio(med["run"], med["bare"]),
        "hooks_ratio": ratio(med["hooks"], med["bare"]),
        "run_cpu_ratio": ratio(cmed["run"], cmed["bare"]),
        "hooks_cpu_ratio": ratio(cmed["hooks"], cmed["bare"]),
        "hooked_modules": len(exh.hooks),
        "repeats_done": len(wall["bare"]),
        "host_syncs": ex.report.host_syncs,
        "host_syncs_hooks": exh.report.host_syncs,
        "raw": {
            "wall_s": wall, "cpu_s": cpu,
            "paired_run_ratio": median([r / b for r, b in zip(wall["run"], wall["bare"])]),
            "min_run_ratio": ratio(min(wall["run"]), min(wall["bare"])),
            "min_hooks_ratio": ratio(min(wall["hooks"]), min(wall["bare"])),
            "paired_hooks_ratio": median([h / b for h, b in zip(wall["hooks"], wall["bare"])]),
            "report_duration_ms": ex.report.duration_s * 1e3,
            "hook_seconds_ms": exh.hook_seconds * 1e3,
        },
    }
    # gradient norms: fused (one host sync) vs a per-parameter .norm().item() loop
    steps["bare"]()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    row.update(time_norms(grads, device))
    del steps, explorers
    clear_grads(model)
    return {"row": row, "explorer": ex, "model": model, "x": x}


def time_norms(grads: list[torch.Tensor], device: str) -> dict[str, Any]:
    from gradviz_widgets.stats import NormBatch

    dev = torch.device(device)
    syncs = {"fused": 0}

    def fused() -> None:
        batch = NormBatch(dev)
        batch.add(grads)
        batch.resolve()
        syncs["fused"] = batch.syncs

    def loop() -> None:
        [g.norm().item() for g in grads]

    fns = {"fused": fused, "loop": loop}
    for f in fns.values():  # warm-up, and calibrate: each sample runs >= ~50 ms
        f()
    t0 = time.perf_counter()
    fused()
    inner = max(1, min(200, int(0.05 / max(time.perf_counter() - t0, 1e-6))))
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(5):
        for k in (("fused", "loop") if r % 2 == 0 else ("loop", "fused")):
            sync(device)
            t0 = time.perf_counter()
            for _ in range(inner):
                fns[k]()
            sync(device)
            samples[k].append((time.perf_counter() - t0) / inner)
    return {
        "norms_n": len(grads),
        "norms_fused_ms": median(samples["fused"]) * 1e3,
        "norms_loop_ms": median(samples["loop"]) * 1e3,
        "norms_fused_syncs": syncs["fused"],
        "norms_loop_syncs": len(grads),
    }


# ---- graph -> DOT -> SVG -------------------------------------------------------------------------
def time_dot(ex: Any, to_dot: Any, repeats: int) -> tuple[dict[str, Any], str, str]:
    """Time from the finished run (ex.graph in hand) to DOT text, default view and full graph."""
    graph = ex.graph
    t_default, t_full = [], []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        view, depth = default_view(graph)
        dot_default = to_dot(view)
        t_default.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        full = graph.view(None)
        dot_full = to_dot(full)
        t_full.append(time.perf_counter() - t0)
    row = {
        "nodes_full": len(graph.nodes), "edges_full": len(graph.edges),
        "default_depth": depth, "nodes_default": len(view.nodes), "edges_default": len(view.edges),
        "dot_default_ms": median(t_default) * 1e3, "dot_full_ms": median(t_full) * 1e3,
    }
    return row, dot_default, dot_full


def wasm_layout(path: Path, cap_s: float, repeats: int) -> tuple[float | None, str, dict]:
    """(warm median ms, status, details) of laying `path` out with Graphviz-WASM in node."""
    node = shutil.which("node")
    if node is None:
        return None, "node not installed", {}
    cmd = [node, str(LAYOUT_JS), "--repeats", str(repeats), "--budget-ms", str(cap_s * 250),
           str(path)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=cap_s + 10)
    except subprocess.TimeoutExpired:
        return None, cap_text(cap_s), {}
    try:
        out = json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return None, f"error: {done.stderr.strip()[-300:]}", {}
    if "error" in out:
        return None, f"error: {out['error'][:300]}", out
    res = out["results"][str(path)]
    if "error" in res:
        return None, f"error: {res['error'][:300]}", out
    if res["first_ms"] > cap_s * 1e3:
        return None, cap_text(cap_s), out
    details = {"init_ms": out["init_ms"], "first_ms": res["first_ms"], "runs_ms": res["runs_ms"],
               "viz_version": out["viz_version"], "graphviz_version": out["graphviz_version"]}
    # warm: the widget's layout worker keeps its instance, so later layouts reuse it
    warm = res["runs_ms"][1:] or res["runs_ms"]
    return median(warm), "ok", details


def native_layout(path: Path, cap_s: float, repeats: int) -> tuple[float | None, str]:
    exe = shutil.which("dot")
    if exe is None:
        return None, "dot not installed"
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        try:
            done = subprocess.run([exe, "-Tsvg", str(path), "-o", os.devnull],
                                  capture_output=True, timeout=cap_s)
        except subprocess.TimeoutExpired:
            return None, cap_text(cap_s)
        if done.returncode != 0:
            return None, f"error: {done.stderr.decode(errors='replace')[-300:]}"
        times.append(time.perf_counter() - t0)
        if sum(times) > cap_s / 4:
            break
    return median(times) * 1e3, "ok"


def torchviz_time(model: Any, x: torch.Tensor, cap_s: float, workdir: Path) -> dict[str, Any]:
    """torchviz.make_dot + `dot -Tsvg` for the loss GradExplorer uses (sum of the output)."""
    try:
        from torchviz import make_dot
    except ImportError:
        return {"torchviz_nodes": None, "torchviz_ms": None, "torchviz_ms_status": "not installed"}
    exe = shutil.which("dot")
    with torch.random.fork_rng():
        torch.manual_seed(0)
        loss = model(x).sum()
    t0 = time.perf_counter()
    graph = make_dot(loss, params=dict(model.named_parameters()))
    source = graph.source
    made = time.perf_counter() - t0
    del loss
    nodes = sum(1 for line in graph.body if "[label=" in line)
    path = workdir / "torchviz.dot"
    path.write_text(source)
    if exe is None:
        return {"torchviz_nodes": nodes, "torchviz_ms": None, "torchviz_ms_status": "dot not installed"}
    t1 = time.perf_counter()
    try:
        done = subprocess.run([exe, "-Tsvg", str(path), "-o", os.devnull], capture_output=True,
                              timeout=max(0.1, cap_s - made))
    except subprocess.TimeoutExpired:
        return {"torchviz_nodes": nodes, "torchviz_ms": None, "torchviz_ms_status": cap_text(cap_s)}
    if done.returncode != 0:
        return {"torchviz_nodes": nodes, "torchviz_ms": None,
                "torchviz_ms_status": f"error: {done.stderr.decode(errors='replace')[-300:]}"}
    return {"torchviz_nodes": nodes, "torchviz_ms": (made + time.perf_counter() - t1) * 1e3,
            "torchviz_ms_status": "ok", "torchviz_make_dot_ms": made * 1e3}


# ---- memory (child processes) ---------------------------------------------------------------
def memory(names: list[str], size: str, device: str, per_model: bool, threads: int,
           timeout: float) -> dict[str, dict[str, dict]]:
    """mode -> model -> child result; a fresh interpreter per mode (and per model if per_model)."""
    env = child_env()
    env["MALLOC_MMAP_THRESHOLD_"] = "131072"
    out: dict[str, dict[str, dict]] = {m: {} for m in MODES}
    groups = [[n] for n in names] if per_model else [names]
    for group in groups:
        for mode in MODES:
            cmd = [sys.executable, "-m", "benchmarks.memory", "--size", size, "--device", device,
                   "--mode", mode, "--models", ",".join(group), "--threads", str(threads)]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT,
                                      timeout=timeout)
                lines = [json.loads(s) for s in done.stdout.splitlines() if s.startswith("{")]
                if not lines:
                    lines = [{"model": n, "error": done.stderr.strip()[-300:]} for n in group]
            except subprocess.TimeoutExpired:
                lines = [{"model": n, "error": cap_text(timeout)} for n in group]
            for row in lines:
                out[mode][row["model"]] = row
            if per_model:
                log(f"  memory {group[0]} {mode}: {out[mode].get(group[0])}")
    return out


def memory_columns(mem: dict[str, dict[str, dict]], name: str) -> dict[str, Any]:
    row: dict[str, Any] = {}
    errors = []
    for mode in MODES:
        r = mem[mode].get(name, {"error": "no result"})
        if "error" in r:
            errors.append(f"{mode}: {r['error']}")
        row[f"mem_{mode}_peak_mib"] = r.get("peak_mib")
        row[f"mem_{mode}_delta_mib"] = r.get("delta_mib")
    row["mem_run_ratio"] = ratio(row["mem_run_peak_mib"], row["mem_bare_peak_mib"])
    row["mem_hooks_ratio"] = ratio(row["mem_hooks_peak_mib"], row["mem_bare_peak_mib"])
    row["mem_run_delta_ratio"] = ratio(row["mem_run_delta_mib"], row["mem_bare_delta_mib"])
    row["mem_run_ratio_status"] = "ok" if not errors else "error: " + "; ".join(errors)
    row["mem_measure"] = next((r.get("measure") for m in MODES
                               if (r := mem[m].get(name)) and "measure" in r), None)
    return row


# ---- one model -------------------------------------------------------------------------------
def bench_model(name: str, args: argparse.Namespace, to_dot: Any, workdir: Path) -> dict[str, Any]:
    log(f"{name}: timing bare / ex.run() / hooks x{args.repeats}")
    timed = time_modes(name, args.size, args.device, args.repeats, args.warmup, args.model_budget)
    row = timed["row"]
    log(f"  bare {row['bare_ms']:.1f} ms, run x{row['run_ratio']:.3f}, "
        f"hooks x{row['hooks_ratio']:.3f}")
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
        log(f"  {which} view: {row['nodes_' + which]} nodes, DOT {row['dot_' + which + '_ms']:.1f}"
            f" ms, WASM {status if ms is None else f'{ms:.0f} ms'}, "
            f"dot {nstatus if nms is None else f'{nms:.0f} ms'}")
    row.update(torchviz_time(timed["model"], timed["x"], args.torchviz_cap, mdir))
    log(f"  torchviz: {row['torchviz_ms_status']} {row['torchviz_ms']}")
    return row


# ---- report -------------------------------------------------------------------------------------
def fmt_ms(v: float | None, status: str | None = None) -> str:
    if v is None:
        return status or "n/a"
    if v >= 10_000:
        return f"{v / 1e3:.0f} s"
    if v >= 1000:
        return f"{v / 1e3:.2f} s"
    return f"{v:.1f} ms" if v < 100 else f"{v:.0f} ms"


def fmt_x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def fmt_mib(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def evaluate_targets(rows: dict[str, dict], size: str) -> list[dict[str, Any]]:
    """One entry per target: met / missed / n/a per model it applies to."""
    out = []

    def check(key: str, what: str, models: list[str], value, limit: float, unit: str = "x"):
        per = {}
        for name in models:
            r = rows.get(name)
            if r is None:
                continue
            v = value(r)
            per[name] = {"value": v, "met": None if v is None else v <= limit}
        met = [p["met"] for p in per.values()]
        status = ("n/a" if not met or all(m is None for m in met)
                  else "met" if all(m for m in met if m is not None) else "missed")
        out.append({"key": key, "target": what, "limit": limit, "unit": unit,
                    "status": status, "models": per})

    big = [n for n in ("resnet50", "gpt2_like") if n in rows]
    every = list(rows)
    check("run_ratio", "ex.run() <= 1.15x bare (ResNet-50, GPT-2-shaped)", big,
          lambda r: r["run_ratio"], TARGETS["run_ratio"])
    check("hooks_ratio", "backward hook on every module <= 1.5x bare (ResNet-50, GPT-2-shaped; "
          "the small models' ratios are in the table: there the fixed per-op cost dominates)", big,
          lambda r: r["hooks_ratio"], TARGETS["hooks_ratio"])
    check("host_syncs", "one host sync per run, with and without hooks (every model)", every,
          lambda r: max(r["host_syncs"], r["host_syncs_hooks"]), 1, "syncs")
    check("run_to_svg_default", "default view: run -> laid-out SVG (WASM) <= 1 s (every model)",
          every, lambda r: None if r["run_to_svg_default_ms"] is None
          else r["run_to_svg_default_ms"] / 1e3, TARGETS["run_to_svg_default_s"], "s")
    check("run_to_svg_full_resnet50", "full view of ResNet-50: run -> laid-out SVG (WASM) <= 2 s",
          [n for n in ("resnet50",) if n in rows],
          lambda r: None if r["run_to_svg_full_ms"] is None else r["run_to_svg_full_ms"] / 1e3,
          TARGETS["run_to_svg_full_resnet50_s"], "s")
    check("mem_ratio", "peak memory of ex.run() <= 1.1x bare (every model)", every,
          lambda r: r["mem_run_ratio"], TARGETS["mem_ratio"])
    if size != "full":
        for t in out:
            t["note"] = "tiny zoo: the targets are for the full zoo; shown for completeness"
    return out


def markdown(result: dict[str, Any]) -> str:
    meta, rows, targets = result["meta"], result["models"], result["targets"]
    L: list[str] = []
    L.append("# Benchmarks")
    L.append("")
    L.append(f"Generated by `{meta['command']}` on {meta['date']} — do not edit by hand.")
    L.append("")
    L.append(f"Machine: {meta['machine']}; torch {meta['torch']} on **{meta['device']}**, "
             f"{meta['threads']} intra-op threads; {meta['dot']}; Graphviz-WASM "
             f"@viz-js/viz {meta.get('viz_version', 'n/a')} (Graphviz "
             f"{meta.get('graphviz_wasm_version', 'n/a')}) in node {meta['node']}. "
             f"Zoo `{meta['size']}`, {meta['repeats']} timed repeats after {meta['warmup']} "
             f"warm-up per mode; caps: torchviz + dot {meta['torchviz_cap_s']:g} s, "
             f"layouts {meta['layout_cap_s']:g} s. Load average at start / end: "
             f"{meta['load_start']} / {meta['load_end']}; the suite took "
             f"{meta['elapsed_s'] / 60:.1f} min. DOT from `{meta['to_dot']}`.")
    L.append("")
    L.append("## Run overhead")
    L.append("")
    L.append("Wall-time medians, measured in one process in alternation (bare, `ex.run()`, "
             "hooked `ex.run()`; the order rotates every repeat). *bare* = forward + "
             "`out.sum().backward()`; `ex.run()` = capture + graph + gradient norms + per-edge "
             "flow; *hooks* = `ex.run()` with a backward hook on every module. *CPU x* is the "
             "same ratio in process CPU time (less sensitive to other load on the machine). "
             "*syncs* = `report.host_syncs`. *norms*: time to get every parameter's gradient "
             "norm from the gradients of a bare run — our fused path (`NormBatch`: L2 in "
             "float64 and max |g|, one host sync) against `[g.norm().item() for g in grads]` "
             "(one sync per parameter).")
    L.append("")
    L.append("| model | params | bare | ex.run() | ratio | CPU x | hooks on every module | "
             "ratio | CPU x | syncs | norms fused (1 sync) | norms loop (syncs) | repeats |")
    L.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, r in rows.items():
        L.append(
            f"| {name} | {r['params'] / 1e6:.2f}M | {fmt_ms(r['bare_ms'])} | {fmt_ms(r['run_ms'])}"
            f" | **{fmt_x(r['run_ratio'])}** | {fmt_x(r['run_cpu_ratio'])} | "
            f"{fmt_ms(r['hooks_ms'])} ({r['hooked_modules']} hooks) | "
            f"**{fmt_x(r['hooks_ratio'])}** | {fmt_x(r['hooks_cpu_ratio'])} | "
            f"{r['host_syncs']} / {r['host_syncs_hooks']} | {fmt_ms(r['norms_fused_ms'])} | "
            f"{fmt_ms(r['norms_loop_ms'])} ({r['norms_loop_syncs']}) | {r['repeats_done']} |")
    L.append("")
    L.append("## Graph and layout")
    L.append("")
    L.append("*nodes*: in the full graph / in the widget's default view (`auto_depth(120)`, "
             "fold depth in brackets). *run → DOT*: from the finished run (`ex.graph` in hand) "
             "to DOT text (choosing the fold depth, folding, `to_dot`); forward and backward are "
             "in the table above. *WASM*: `viz.renderString(dot, {format: \"svg\"})` with "
             "@viz-js/viz in node, median of the warm layouts (the widget's layout worker keeps "
             "its instance); *run → SVG* = run → DOT + WASM. *dot*: native `dot -Tsvg` "
             "(including process start). *torchviz*: `torchviz.make_dot` + `dot -Tsvg` of the "
             "same loss (every node, no folding).")
    L.append("")
    L.append("| model | nodes full / default | default: run → DOT | WASM | **run → SVG** | "
             "dot | full: run → DOT | WASM | **run → SVG** | dot | torchviz nodes | "
             "torchviz + dot |")
    L.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for name, r in rows.items():
        d = "none" if r["default_depth"] is None else r["default_depth"]
        L.append(
            f"| {name} | {r['nodes_full']} / {r['nodes_default']} ({d}) | "
            f"{fmt_ms(r['dot_default_ms'])} | "
            f"{fmt_ms(r['wasm_default_ms'], r.get('wasm_default_ms_status'))} | "
            f"**{fmt_ms(r['run_to_svg_default_ms'], r.get('wasm_default_ms_status'))}** | "
            f"{fmt_ms(r['native_default_ms'], r.get('native_default_ms_status'))} | "
            f"{fmt_ms(r['dot_full_ms'])} | "
            f"{fmt_ms(r['wasm_full_ms'], r.get('wasm_full_ms_status'))} | "
            f"**{fmt_ms(r['run_to_svg_full_ms'], r.get('wasm_full_ms_status'))}** | "
            f"{fmt_ms(r['native_full_ms'], r.get('native_full_ms_status'))} | "
            f"{r['torchviz_nodes'] if r['torchviz_nodes'] is not None else 'n/a'} | "
            f"{fmt_ms(r['torchviz_ms'], r.get('torchviz_ms_status'))} |")
    L.append("")
    L.append("## Peak memory")
    L.append("")
    measure = next((r.get("mem_measure") for r in rows.values() if r.get("mem_measure")), "n/a")
    L.append(f"Measure: {measure}, in a fresh child process per model and mode "
             "(`benchmarks/memory.py`): build the model, run the mode once (warm-up), clear "
             "`.grad`, reset the high-water mark, run it again. *peak* is that run's high-water "
             "mark (it includes the interpreter, torch and the model: MiB); *over base* is the "
             "peak minus the resident size just before the run, i.e. what the run itself added. "
             "On CPU the child runs with `MALLOC_MMAP_THRESHOLD_=131072` so freed tensors go back "
             "to the OS and the resident size follows the live tensors.")
    L.append("")
    L.append("| model | bare peak (over base) | ex.run() peak (over base) | **ratio** | "
             "over-base ratio | hooks peak (over base) | hooks ratio |")
    L.append("|---|--:|--:|--:|--:|--:|--:|")
    for name, r in rows.items():
        if r.get("mem_run_ratio_status", "ok") != "ok":
            L.append(f"| {name} | {r['mem_run_ratio_status']} | | | | | |")
            continue
        L.append(
            f"| {name} | {fmt_mib(r['mem_bare_peak_mib'])} ({fmt_mib(r['mem_bare_delta_mib'])}) | "
            f"{fmt_mib(r['mem_run_peak_mib'])} ({fmt_mib(r['mem_run_delta_mib'])}) | "
            f"**{fmt_x(r['mem_run_ratio'])}** | {fmt_x(r['mem_run_delta_ratio'])} | "
            f"{fmt_mib(r['mem_hooks_peak_mib'])} ({fmt_mib(r['mem_hooks_delta_mib'])}) | "
            f"{fmt_x(r['mem_hooks_ratio'])} |")
    L.append("")
    L.append("## Targets")
    L.append("")
    L.append("| target | status | per model |")
    L.append("|---|---|---|")
    for t in targets:
        unit = t["unit"]
        parts = []
        for name, p in t["models"].items():
            v = p["value"]
            shown = "n/a" if v is None else (f"{v:.2f}{unit}" if unit in ("x", "s") else f"{v}")
            mark = "" if p["met"] is None else (" ✓" if p["met"] else " ✗")
            parts.append(f"{name} {shown}{mark}")
        status = t["status"] + (f" ({t['note']})" if t.get("note") else "")
        L.append(f"| {t['target']} | **{status}** | {', '.join(parts)} |")
    L.append("")
    if result.get("analysis"):
        L.append(result["analysis"].rstrip())
        L.append("")
    if result["errors"]:
        L.append("## Errors")
        L.append("")
        for e in result["errors"]:
            L.append(f"- {e}")
        L.append("")
    L.append("Raw samples, statuses and per-layout details are in `benchmarks.json` next to "
             "this file.")
    L.append("")
    return "\n".join(L)


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
    info["node"] = subprocess.run([node, "--version"], capture_output=True, text=True
                                  ).stdout.strip() if node else "not installed"
    return info


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true",
                    help="tiny zoo, 1 repeat, caps of a few seconds; writes to out/benchmarks_smoke")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda / cuda:N")
    ap.add_argument("--models", default=None, help="comma-separated zoo names (default: all)")
    ap.add_argument("--size", choices=("full", "tiny"), default=None)
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per mode (default 5)")
    ap.add_argument("--warmup", type=int, default=None, help="warm-up runs per mode (default 1)")
    ap.add_argument("--torchviz-cap", type=float, default=None,
                    help="seconds for torchviz.make_dot + dot -Tsvg (default 120)")
    ap.add_argument("--layout-cap", type=float, default=None,
                    help="seconds for one layout of our DOT (default 60)")
    ap.add_argument("--model-budget", type=float, default=None,
                    help="seconds of timing per model after which repeats stop at 3 (default 150)")
    ap.add_argument("--no-memory", action="store_true", help="skip the memory child processes")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's)")
    ap.add_argument("--render-only", action="store_true",
                    help="re-write benchmarks.md from the benchmarks.json in --out-dir (no runs)")
    ap.add_argument("--out-dir", default=None,
                    help="where benchmarks.md / benchmarks.json go (default docs/)")
    args = ap.parse_args(argv)
    smoke = args.smoke
    args.size = args.size or ("tiny" if smoke else "full")
    args.repeats = args.repeats or (1 if smoke else 5)
    args.warmup = args.warmup if args.warmup is not None else 1
    args.torchviz_cap = args.torchviz_cap or (5.0 if smoke else 120.0)
    args.layout_cap = args.layout_cap or (5.0 if smoke else 60.0)
    args.model_budget = args.model_budget or (10.0 if smoke else 150.0)
    args.out_dir = Path(args.out_dir or (ROOT / "out" / "benchmarks_smoke" if smoke else ROOT / "docs"))
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
    if not args.no_memory:
        log("memory: fresh child process per " + ("mode" if args.smoke else "model and mode"))
        mem = memory(names, args.size, args.device, per_model=not args.smoke,
                     threads=args.threads, timeout=60 if args.smoke else 900)
    else:
        mem = {m: {n: {"model": n, "error": "skipped (--no-memory)"} for n in names} for m in MODES}
    for name, row in rows.items():
        row.update(memory_columns(mem, name))
        for col in COLUMNS:
            row.setdefault(col, None)
        for col in STATUS_COLUMNS:
            row.setdefault(f"{col}_status", "ok" if row[col] is not None else "n/a")
    viz = next((r["raw"]["layout"]["wasm_default"] for r in rows.values()
                if r["raw"]["layout"].get("wasm_default")), {})
    meta = {
        "command": "python -m benchmarks.run" + ("" if argv is None else " " + " ".join(argv)),
        "date": _dt.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                   f"{platform.python_implementation()} {platform.python_version()}",
        "torch": torch.__version__, "device": args.device, "threads": torch.get_num_threads(),
        "size": args.size, "repeats": args.repeats, "warmup": args.warmup,
        "torchviz_cap_s": args.torchviz_cap, "layout_cap_s": args.layout_cap,
        "to_dot": to_dot_name, "load_start": load_start,
        "load_end": ", ".join(f"{x:.2f}" for x in os.getloadavg()),
        "viz_version": viz.get("viz_version"), "graphviz_wasm_version": viz.get("graphviz_version"),
        "elapsed_s": time.perf_counter() - started, "smoke": args.smoke,
        **tool_versions(),
    }
    if argv is None:
        meta["command"] = "python -m benchmarks.run " + " ".join(sys.argv[1:])
    meta["command"] = meta["command"].strip()
    targets = evaluate_targets(rows, args.size)
    result = {"meta": meta, "columns": list(COLUMNS), "models": rows, "targets": targets,
              "errors": errors, "analysis": analysis_text() if args.size == "full" else ""}
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "benchmarks.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    (args.out_dir / "benchmarks.md").write_text(markdown(result))
    log(f"wrote {args.out_dir / 'benchmarks.md'} and benchmarks.json in {meta['elapsed_s']:.0f} s")
    return 1 if errors else 0


def analysis_text() -> str:
    """benchmarks/analysis.md (hand-written: what bounds the misses), appended to the full report."""
    path = HERE / "analysis.md"
    return path.read_text() if path.exists() else ""


if __name__ == "__main__":
    sys.exit(main())
