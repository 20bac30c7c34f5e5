"""Small helpers shared by the benchmark modules: medians, ratios, logging, child env."""

from __future__ import annotations

import os
import statistics
import sys
import time

from benchmarks.common import ROOT


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
