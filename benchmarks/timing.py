"""Timing of the three modes (bare, ex.run(), hooks) in alternation, and fused vs looped norms."""

from __future__ import annotations

import gc
import math
import time
from typing import Any

import torch

from benchmarks.common import MODES, build, clear_grads, mode_step, sync
from benchmarks.util import median, ratio


def time_modes(
    name: str, size: str, device: str, repeats: int, warmup: int, budget_s: float = math.inf
) -> dict[str, Any]:
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
        order = MODES[r % len(MODES) :] + MODES[: r % len(MODES)]
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
            "wall_s": wall,
            "cpu_s": cpu,
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
    from gradviz_widgets.stats.norms import NormBatch

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
        for k in ("fused", "loop") if r % 2 == 0 else ("loop", "fused"):
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
