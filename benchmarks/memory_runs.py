"""Peak-memory columns: runs benchmarks/memory.py in fresh child processes and reads them back."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from benchmarks.common import MODES, ROOT
from benchmarks.util import cap_text, child_env, log, ratio


def memory(
    names: list[str], size: str, device: str, per_model: bool, threads: int, timeout: float
) -> dict[str, dict[str, dict]]:
    """mode -> model -> child result; a fresh interpreter per mode (and per model if per_model)."""
    env = child_env()
    env["MALLOC_MMAP_THRESHOLD_"] = "131072"
    out: dict[str, dict[str, dict]] = {m: {} for m in MODES}
    groups = [[n] for n in names] if per_model else [names]
    for group in groups:
        for mode in MODES:
            cmd = [
                sys.executable,
                "-m",
                "benchmarks.memory",
                "--size",
                size,
                "--device",
                device,
                "--mode",
                mode,
                "--models",
                ",".join(group),
                "--threads",
                str(threads),
            ]
            try:
                done = subprocess.run(
                    cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout
                )
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
    row["mem_measure"] = next(
        (r.get("measure") for m in MODES if (r := mem[m].get(name)) and "measure" in r), None
    )
    return row
