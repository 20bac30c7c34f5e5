"""Two runs side by side: per-parameter norms, their ratio and the statuses that changed.

The uses: before/after a fix, CPU vs GPU numerics, float32 vs bf16 autocast, two seeds. Works on
reports alone (no torch needed), so saved runs compare as well as live ones.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pandas is imported when a table is asked for
    import pandas as pd

    from .grad_report import GradReport

COLUMNS = (
    "module",
    "norm_a",
    "norm_b",
    "ratio",
    "status_a",
    "status_b",
    "status_changed",
    "log10_ratio",  # also where the ratio itself is beyond float64
)


def norm_ratio(a: float | None, b: float | None) -> float:
    """`b / a`, with the cases a division hides spelled out.

    NaN where either side has no gradient or is not finite, and where b / a is beyond float64
    (`log10_ratio` still has it); inf where a is exactly 0.0 and b is not (a gradient came
    back); 1.0 where both are exactly 0.0.

    Example:
        >>> norm_ratio(2.0, 3.0), norm_ratio(0.0, 1.0), norm_ratio(0.0, 0.0), norm_ratio(None, 1.0)
        (1.5, inf, 1.0, nan)
        >>> norm_ratio(1e-300, 1e300)  # 1e600 is no float64: not a number rather than inf
        nan
    """
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
        return math.nan
    if a == 0.0:
        return 1.0 if b == 0.0 else math.inf
    ratio = b / a
    if math.isinf(ratio) or (ratio == 0.0 and b != 0.0):
        return math.nan
    return ratio


def log10_ratio(a: float | None, b: float | None) -> float:
    """log10(b / a) for two non-zero finite norms, also where b / a is beyond float64; NaN
    otherwise.

    Example:
        >>> log10_ratio(1e-300, 1e300), log10_ratio(0.0, 1.0)
        (600.0, nan)
    """
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or a == 0 or b == 0:
        return math.nan
    return math.log10(abs(b)) - math.log10(abs(a))


def compare_rows(a: GradReport, b: GradReport) -> list[dict[str, Any]]:
    """One dict per parameter of either run (a's order first, then b's new ones). Both runs'
    gradients are judged by b's thresholds (the newer): a threshold changed between the two
    runs changes no status by itself (it listed "healthy -> exploding" for gradients that had
    not moved)."""
    recs_a = {p.name: p for p in a.judged_by(b.thresholds).params}
    recs_b = {p.name: p for p in b.params}
    names = list(recs_a) + [n for n in recs_b if n not in recs_a]
    rows = []
    for name in names:
        pa, pb = recs_a.get(name), recs_b.get(name)
        status_a = pa.status if pa else "absent"
        status_b = pb.status if pb else "absent"
        norm_a = pa.norm if pa else None
        norm_b = pb.norm if pb else None
        rows.append(
            {
                "param": name,
                "module": (pa or pb).module,  # type: ignore[union-attr]
                "norm_a": norm_a,
                "norm_b": norm_b,
                "ratio": norm_ratio(norm_a, norm_b),
                "log10_ratio": log10_ratio(norm_a, norm_b),
                "status_a": status_a,
                "status_b": status_b,
                "status_changed": status_a != status_b,
            }
        )
    return rows


def compare_reports(a: GradReport, b: GradReport) -> pd.DataFrame:
    """A DataFrame indexed by parameter: norm_a, norm_b, ratio, status_a, status_b, ...

    None (no gradient) shows as NaN in the norm columns; the status columns keep "none" apart
    from "zero". `status_changed` marks the rows to look at first.
    """
    import pandas as pd

    rows = compare_rows(a, b)
    frame = pd.DataFrame(rows, columns=("param", *COLUMNS)).set_index("param")
    for col in ("norm_a", "norm_b", "ratio", "log10_ratio"):
        frame[col] = frame[col].astype("float64")
    return frame


__all__ = ["compare_reports", "compare_rows", "norm_ratio"]
