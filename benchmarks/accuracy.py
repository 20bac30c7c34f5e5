"""Norm accuracy vs cost (float32 / float64 `vector_norm` against our NormBatch) and the run
overhead on a 1,000-layer Linear chain (deep graphs: per-node cost, not tensor size)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from benchmarks.common import sync
from benchmarks.util import median, ratio


def _timed(fn: Callable[[], float], repeats: int, device: str) -> tuple[float, float]:
    """(median ms, the value of the last call)."""
    value = fn()  # warm-up
    samples = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        value = fn()
        samples.append(time.perf_counter() - t0)
    return median(samples) * 1e3, value


def _ours(g: torch.Tensor) -> float:
    from gradviz_widgets.stats.norms import NormBatch

    batch = NormBatch(g.device)
    slot = batch.add([g])[0]
    return batch.resolve()[slot]


METHODS: dict[str, Callable[[torch.Tensor], float]] = {
    "float32 vector_norm": lambda g: torch.linalg.vector_norm(g).item(),
    "float64 vector_norm": lambda g: torch.linalg.vector_norm(g, dtype=torch.float64).item(),
    "ours (NormBatch)": _ours,
}


def norm_accuracy(sizes: list[int], device: str, repeats: int) -> list[dict[str, Any]]:
    """Per size and method: median time on randn data and the relative error against a float64
    reference, on randn data and on a constant tensor (0.1 as float32, whose square rounds)."""
    rows = []
    gen = torch.Generator().manual_seed(0)
    for n in sizes:
        g = torch.randn(n, generator=gen).to(device)
        const = torch.full((n,), 0.1, device=device)
        ref = torch.linalg.vector_norm(g.double()).item()
        ref_const = float(torch.tensor(0.1)) * n**0.5
        for name, fn in METHODS.items():
            ms, value = _timed(functools.partial(fn, g), repeats, device)
            rows.append(
                {
                    "elements": n,
                    "method": name,
                    "ms": ms,
                    "rel_err": abs(value - ref) / ref,
                    "rel_err_const": abs(fn(const) - ref_const) / ref_const,
                }
            )
    return rows


def chain(layers: int, width: int = 16) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)])


def chain_row(layers: int, device: str, repeats: int) -> dict[str, Any]:
    """`ex.run()` against a bare forward + backward on a `layers`-deep Linear chain (width 16,
    batch 8), in alternation."""
    from gradviz_widgets import GradExplorer

    model = chain(layers).to(device)
    x = torch.randn(8, 16, device=device)
    ex = GradExplorer(model, x)

    def bare() -> None:
        for p in model.parameters():
            p.grad = None
        model(x).sum().backward()

    steps = {"bare": bare, "run": ex.run}
    for f in steps.values():
        f()
    samples: dict[str, list[float]] = {k: [] for k in steps}
    for r in range(repeats):
        for k in ("bare", "run") if r % 2 == 0 else ("run", "bare"):
            sync(device)
            t0 = time.perf_counter()
            steps[k]()
            sync(device)
            samples[k].append(time.perf_counter() - t0)
    bare_ms, run_ms = median(samples["bare"]) * 1e3, median(samples["run"]) * 1e3
    return {
        "layers": layers,
        "width": 16,
        "params": sum(p.numel() for p in model.parameters()),
        "bare_ms": bare_ms,
        "run_ms": run_ms,
        "run_ratio": ratio(run_ms, bare_ms),
        "host_syncs": ex.report.host_syncs,
        "repeats": repeats,
    }


def markdown_sections(result: dict[str, Any]) -> list[str]:
    """The two sections for benchmarks.md (empty when the result has neither)."""
    L: list[str] = []
    acc = result.get("norm_accuracy")
    if acc:
        L += [
            "## Norm accuracy vs cost",
            "",
            "One float32 tensor of N elements; median time of the norm (with the read-back); "
            "relative error against `vector_norm(g.double())` on randn data, and on a "
            "constant tensor (0.1 as float32: its square is not a float32, so float32 "
            "squaring errs the same way everywhere and no blocking averages it out). *ours* "
            "is what every gradient norm of a run goes through: squares summed in float64 "
            "(chunks copied to a float64 buffer on the CPU, `_foreach_norm(dtype=float64)` "
            "on CUDA), max |g| and the dedup of tensors seen twice included.",
            "",
            "| elements | method | time | rel. error (randn) | rel. error (constant) |",
            "|--:|---|--:|--:|--:|",
        ]
        for r in acc:
            L.append(
                f"| {r['elements']:,} | {r['method']} | {r['ms']:.1f} ms | "
                f"{r['rel_err']:.1e} | {r['rel_err_const']:.1e} |"
            )
        L.append("")
    ch = result.get("chain")
    if ch:
        L += [
            "## Deep chain",
            "",
            f"`nn.Sequential` of {ch['layers']:,} `Linear({ch['width']}, {ch['width']})` "
            f"({ch['params']:,} parameters), batch 8: bare forward + backward against "
            f"`ex.run()`, medians of {ch['repeats']} alternations.",
            "",
            "| layers | bare | ex.run() | ratio | syncs |",
            "|--:|--:|--:|--:|--:|",
            f"| {ch['layers']:,} | {ch['bare_ms']:.1f} ms | {ch['run_ms']:.1f} ms | "
            f"**{ch['run_ratio']:.2f}x** | {ch['host_syncs']} |",
            "",
        ]
    return L
