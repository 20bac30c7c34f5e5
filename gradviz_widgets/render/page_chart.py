"""The standalone page's chart: log-scale bars per parameter as SVG text, no plotly.js.

The same visual language as the notebook chart (render/chart.py, vocabulary.STYLES): None and
exactly 0.0 are pinned at the floor with their own pattern and label, NaN/Inf at the ceiling,
threshold lines for vanishing and exploding. Bars are addressed by their row index
(`data-row`), never by the parameter's name; names appear only as escaped text.

Example:
    >>> svg = chart_svg([{"name": "w", "norm": 0.5, "status": "healthy"}], Thresholds())
    >>> svg.startswith("<svg") and 'data-row="0"' in svg
    True
"""

from __future__ import annotations

import html
import math
from typing import Any

from ..vocabulary import STYLES, Thresholds, format_norm, plain_text, style
from .chart import fitted_names

ROW_H = 20
LABEL_W = 210
BAR_W = 260
PAD = 28


def _span(rows: list[dict[str, Any]], thresholds: Thresholds) -> tuple[float, float]:
    """log10 range of the axis: every finite positive norm and both thresholds, padded."""
    logs = [
        math.log10(r["norm"])
        for r in rows
        if r.get("norm") is not None and math.isfinite(r["norm"]) and r["norm"] > 0
    ]
    logs += [math.log10(v) for v in thresholds.lines().values()]  # checks turned off: no line
    if not logs:
        return -9, 2
    lo, hi = math.floor(min(logs)) - 1, math.ceil(max(logs)) + 1
    return lo, hi


def _x(value: float, lo: float, hi: float) -> float:
    return LABEL_W + BAR_W * (math.log10(value) - lo) / (hi - lo)


#: characters of a bar's label: what fits LABEL_W at 11 px (its whole name is in the hover)
LABEL_CHARS = 30


def _bar(i: int, row: dict[str, Any], lo: float, hi: float, label_text: str) -> str:
    status = row.get("status", "none")
    look = style(status)
    fill, border, label = look.fill, look.line, look.label
    norm = row.get("norm")
    y = PAD + i * ROW_H
    if status in ("none", "zero"):
        width, text = 6.0, label
    elif norm is None or not math.isfinite(norm):
        width, text = float(BAR_W), label
    else:
        width, text = max(_x(norm, lo, hi) - LABEL_W, 1.0), format_norm(norm)
    pattern = look.svg_dash
    name = html.escape(plain_text(row.get("name", "")))
    why = f" ({html.escape(plain_text(row['reason']))})" if row.get("reason") else ""
    return (
        f'<g class="bar" data-row="{i}" tabindex="0" role="button" '
        f'aria-label="{name}: {html.escape(text)}{why}">'
        f"<title>{name}\n{html.escape(label)}: {html.escape(text)}{why}</title>"
        f'<rect class="hit" x="0" y="{y - 2}" width="{LABEL_W + BAR_W + 90}" height="{ROW_H}" '
        'fill="transparent"/>'
        f'<text x="{LABEL_W - 6}" y="{y + 12}" text-anchor="end" font-size="11">'
        f"{html.escape(label_text)}</text>"
        f'<rect x="{LABEL_W}" y="{y}" width="{width:.1f}" height="{ROW_H - 6}" fill="{fill}" '
        f'stroke="{border}"{pattern}/>'
        f'<text x="{LABEL_W + width + 4:.1f}" y="{y + 12}" font-size="10" fill="#444"{HALO}>'
        f"{html.escape(text)}</text></g>"
    )


# a white outline under each value label: a threshold line through it leaves it legible
HALO = ' stroke="#fff" stroke-width="3" stroke-linejoin="round" paint-order="stroke"'


def _axis(lo: float, hi: float, height: float, thresholds: Thresholds) -> str:
    parts = []
    step = max(1, math.ceil((hi - lo) / 6))  # at most ~7 labels: they never overlap
    for e in range(int(lo), int(hi) + 1):
        x = _x(10.0**e, lo, hi)
        parts.append(
            f'<line x1="{x:.1f}" y1="{PAD - 6}" x2="{x:.1f}" y2="{height}" stroke="#eee"/>'
        )
        if (e - int(lo)) % step == 0:
            parts.append(
                f'<text x="{x:.1f}" y="{PAD - 10}" font-size="9" '
                f'text-anchor="middle" fill="#666">1e{e}</text>'
            )
    for name, value in thresholds.lines().items():
        color = STYLES[name].line
        x = _x(value, lo, hi)
        parts.append(
            f'<line x1="{x:.1f}" y1="{PAD - 6}" x2="{x:.1f}" y2="{height}" '
            f'stroke="{color}" stroke-dasharray="4 3"><title>{name} threshold '
            f"{format_norm(value)}</title></line>"
        )
    return "".join(parts)


def chart_svg(rows: list[dict[str, Any]], thresholds: Thresholds) -> str:
    """SVG text: one bar per row (name, norm, status, reason), log axis, threshold lines."""
    lo, hi = _span(rows, thresholds)
    height = PAD + len(rows) * ROW_H + 8
    width = LABEL_W + BAR_W + 90
    labels = fitted_names([plain_text(r.get("name", "")) for r in rows], LABEL_CHARS, params=True)
    bars = "".join(_bar(i, r, lo, hi, labels[i]) for i, r in enumerate(rows))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="gradient norm per parameter, '
        f'log scale">{_axis(lo, hi, height, thresholds)}{bars}</svg>'
    )


__all__ = ["chart_svg"]
