"""Graph sizes and DOT text, Graphviz-WASM (node) and native `dot` layouts, torchviz."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import default_view
from benchmarks.util import cap_text, median

HERE = Path(__file__).resolve().parent
LAYOUT_JS = HERE / "layout_wasm.mjs"


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
        "nodes_full": len(graph.nodes),
        "edges_full": len(graph.edges),
        "default_depth": depth,
        "nodes_default": len(view.nodes),
        "edges_default": len(view.edges),
        "dot_default_ms": median(t_default) * 1e3,
        "dot_full_ms": median(t_full) * 1e3,
    }
    return row, dot_default, dot_full


def wasm_layout(path: Path, cap_s: float, repeats: int) -> tuple[float | None, str, dict]:
    """(warm median ms, status, details) of laying `path` out with Graphviz-WASM in node."""
    node = shutil.which("node")
    if node is None:
        return None, "node not installed", {}
    cmd = [
        node,
        str(LAYOUT_JS),
        "--repeats",
        str(repeats),
        "--budget-ms",
        str(cap_s * 250),
        str(path),
    ]
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
    details = {
        "init_ms": out["init_ms"],
        "first_ms": res["first_ms"],
        "runs_ms": res["runs_ms"],
        "viz_version": out["viz_version"],
        "graphviz_version": out["graphviz_version"],
    }
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
            done = subprocess.run(
                [exe, "-Tsvg", str(path), "-o", os.devnull], capture_output=True, timeout=cap_s
            )
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
        return {
            "torchviz_nodes": nodes,
            "torchviz_ms": None,
            "torchviz_ms_status": "dot not installed",
        }
    t1 = time.perf_counter()
    try:
        done = subprocess.run(
            [exe, "-Tsvg", str(path), "-o", os.devnull],
            capture_output=True,
            timeout=max(0.1, cap_s - made),
        )
    except subprocess.TimeoutExpired:
        return {"torchviz_nodes": nodes, "torchviz_ms": None, "torchviz_ms_status": cap_text(cap_s)}
    if done.returncode != 0:
        return {
            "torchviz_nodes": nodes,
            "torchviz_ms": None,
            "torchviz_ms_status": f"error: {done.stderr.decode(errors='replace')[-300:]}",
        }
    return {
        "torchviz_nodes": nodes,
        "torchviz_ms": (made + time.perf_counter() - t1) * 1e3,
        "torchviz_ms_status": "ok",
        "torchviz_make_dot_ms": made * 1e3,
    }
