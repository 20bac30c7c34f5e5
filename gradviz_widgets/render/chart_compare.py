"""Compare mode's chart: runs A and B as grouped bars per parameter (or module) on the log axis,
and the ratio B/A as diamonds on a second log axis. Rows, pinned values (zero and None at the
floor, NaN/Inf at the ceiling), patterns and colours are render/chart.py's; a row whose status changed
is marked Δ and bold, with a badge ("0.0 → healthy") in its hover.
"""

from __future__ import annotations

import math
from typing import Any

from ..report.compare import log10_ratio, norm_ratio
from ..vocabulary import format_norm
from .chart import (
    FLAT_SHARE,
    NAME_CHARS,
    PATTERN_INK,
    PATTERNS,
    PLOT_SIDES,
    UPRIGHT_MAX,
    axis_range,
    bar_rows,
    chart_shape,
    distinct,
    figure_layout,
    plotly_text,
    short_names,
    text_px,
    tick_angle,
)
from .compare_view import badge, ratio_color
from .dot import STATUS_STYLE
from .elide import elide_middle

A_INK, B_INK = "#555555", "#000000"  # bar outlines: thin grey for A, black for B


def compare_rows(report_a: Any, report_b: Any, mode: str = "param") -> list[dict[str, Any]]:
    """One row per name of either run (A's order, then B's new ones): name, module, the row of
    each run (None where a run lacks it), ratio and whether the status changed."""
    rows_a = {r["name"]: r for r in bar_rows(report_a, mode)}
    rows_b = {r["name"]: r for r in bar_rows(report_b, mode)}
    out = []
    for name in [*rows_a, *(n for n in rows_b if n not in rows_a)]:
        a, b = rows_a.get(name), rows_b.get(name)
        status_a = a["status"] if a else "absent"
        status_b = b["status"] if b else "absent"
        out.append(
            {
                "name": name,
                "module": (a or b or {}).get("module", ""),
                "a": a,
                "b": b,
                "ratio": norm_ratio(a["norm"] if a else None, b["norm"] if b else None),
                "changed": status_a != status_b,
                "badge": badge(status_a, status_b),
            }
        )
    return out


def compare_figure(
    report_a: Any, report_b: Any, mode: str = "param", width: int | None = None
) -> dict[str, Any]:
    """The grouped figure as a plain dict (data + layout), ready for go.FigureWidget. Given
    the chart's `width` in px, its names are short and readable there: upright when each
    fits its group, else flat rows; without it, full names, upright up to UPRIGHT_MAX bars.

    Traces: [0] run A (clickable, like the normal chart's bars), [1] run B (left to right in
    each group: A, then B), [2] ratio B/A.
    """
    report_a = report_a.judged_by(report_b.thresholds)  # a threshold alone changes no status
    rows = compare_rows(report_a, report_b, mode)
    present = [r["a"] for r in rows if r["a"]] + [r["b"] for r in rows if r["b"]]
    lo, hi = axis_range(present, report_b)
    floor, ceil = 10 ** (lo + 0.3), 10 ** (hi - 0.3)
    names, shape, angle = _compare_names(rows, mode, width)
    flat = shape["orientation"] == "h"
    # one figure layout from render/chart.py (thresholds, axis, margins), then grouped
    layout = figure_layout(report_b, mode, (lo, hi), shape)
    layout["xaxis" if not flat else "yaxis"]["tickangle"] = angle
    layout.update(barmode="group", showlegend=True, bargap=0.2, bargroupgap=0.05)
    layout["title"]["text"] = "A vs B: gradient norms and the ratio B/A"
    layout["legend"] = {"orientation": "h", "y": -0.25, "x": 0}
    if flat:  # in the header, under the title: never over the first rows
        top = 1 - 30 / shape["height"]
        legend = {"x": 0.01, "y": top, "yref": "container", "yanchor": "top"}
        layout["legend"] = {"orientation": "h", **legend}
    name_axis = "yaxis" if flat else "xaxis"
    layout[name_axis] = {**layout[name_axis], "type": "category"}
    ratios = [r["ratio"] for r in rows]
    finite = [x for x in ratios if math.isfinite(x) and x > 0] + [1.0]
    r_lo, r_hi = math.floor(math.log10(min(finite))) - 1, math.ceil(math.log10(max(finite))) + 1
    ratio_axis = {
        "type": "log",
        "range": [r_lo, r_hi],
        "title": {"text": "ratio B/A (◆, log)"},
        "showgrid": False,
        "exponentformat": "power",
        "dtick": 1,  # decades only
    }
    if flat:
        layout["xaxis2"] = {**ratio_axis, "overlaying": "x", "side": "bottom"}
    else:
        layout["yaxis2"] = {**ratio_axis, "overlaying": "y", "side": "right"}
        layout["margin"] = {**layout["margin"], "r": 50}
    data = [
        _run_trace("A", [r["a"] for r in rows], rows, names, floor, ceil, flat, A_INK),
        _run_trace("B", [r["b"] for r in rows], rows, names, floor, ceil, flat, B_INK),
        _ratio_trace(rows, names, ratios, 10**r_lo, 10**r_hi, flat),
    ]
    return {"data": data, "layout": layout}


def _compare_names(
    rows: list[dict[str, Any]], mode: str, width: int | None
) -> tuple[list[str], dict[str, Any], int]:
    """One distinct name per row (a changed status: "Δ" and bold), the chart's shape and the
    tick angle: short names, upright when every one fits under its group at `width` px;
    full names (upright up to UPRIGHT_MAX) when the width is not known."""
    marks = ["Δ " if r["changed"] else "" for r in rows]
    if width is None:
        shown = distinct([plotly_text(r["name"]) for r in rows])
        return _marked(marks, shown), chart_shape(len(rows)), -45
    shorts = short_names([r["name"] for r in rows], params=mode == "param")
    slot = (width - PLOT_SIDES - 40) / max(len(rows), 1)  # the ratio axis takes ~40 px
    upright = distinct([plotly_text(n) for n in shorts])  # one row per name, always
    angle = tick_angle([m + t for m, t in zip(marks, upright)], slot)
    fits = len(rows) <= UPRIGHT_MAX and angle is not None
    shown = upright
    if not fits:
        limit = max(16, min(NAME_CHARS, int(width * FLAT_SHARE / text_px("x"))))
        shown = distinct([plotly_text(elide_middle(n, limit)) for n in shorts])
    return (
        _marked(marks, shown),
        chart_shape(len(rows), upright=fits),
        angle if fits and angle else 0,
    )


def _marked(marks: list[str], shown: list[str]) -> list[str]:
    return [(m + "<b>" if m else "") + t + ("</b>" if m else "") for m, t in zip(marks, shown)]


def _cell(c: dict[str, Any] | None, floor: float, ceil: float) -> tuple[Any, str, str, str]:
    """Value (zero and None pinned to the floor, NaN/Inf to the ceiling), text, fill and
    pattern of one run's bar; no bar where the run lacks the row."""
    s = c["status"] if c else "none"
    n = c["norm"] if c else None
    value = floor if s in ("zero", "none") else ceil if s == "nonfinite" else n
    fill, border, _, _ = STATUS_STYLE[s]
    text = "absent" if c is None else format_norm(n) if s != "none" else "None"
    return (
        None if c is None else value,
        text,
        fill if s in ("zero", "none") else border,
        PATTERNS[s],
    )


def _run_trace(
    run: str,
    cells: list[dict[str, Any] | None],
    rows: list[dict[str, Any]],
    names: list[str],
    floor: float,
    ceil: float,
    flat: bool,
    ink: str,
) -> dict[str, Any]:
    columns = [list(col) for col in zip(*(_cell(c, floor, ceil) for c in cells))]
    values, text, fills, patterns = columns or ([], [], [], [])
    custom = [
        [
            r["name"],
            r["module"],
            (c or {}).get("status", "absent"),
            plotly_text(r["name"]),
            r["badge"] if r["changed"] else "status unchanged",
        ]
        for r, c in zip(rows, cells)
    ]
    trace = {
        "type": "bar",
        "name": f"run {run}",
        "orientation": "h" if flat else "v",
        "text": text,
        "textposition": "none",
        "customdata": custom,
        "opacity": 1.0 if run == "B" else 0.6,
        "marker": {
            "color": fills,
            "line": {"color": ink, "width": 1.5 if run == "B" else 1},
            "pattern": {
                "shape": patterns,
                "fgcolor": PATTERN_INK,
                "size": 6,
                "fillmode": "replace",
            },
        },
        "hovertemplate": f"<b>%{{customdata[3]}}</b><br>run {run}: ‖g‖ = %{{text}}"
        "<br>status: %{customdata[2]}<br>%{customdata[4]}<extra></extra>",
    }
    return {**trace, "y": names, "x": values} if flat else {**trace, "x": names, "y": values}


def _ratio_trace(
    rows: list[dict[str, Any]],
    names: list[str],
    ratios: list[float],
    lo: float,
    hi: float,
    flat: bool,
) -> dict[str, Any]:
    # inf (a gradient came back) pins to the top of the ratio axis, NaN (no ratio) is left out;
    # a ratio beyond float64 pins to its end of the axis and says its power of ten
    top, bottom = hi / 10**0.3, lo * 10**0.3  # inside the plot: a marker is not cut in half
    logs = [log10_ratio(*((r[k] or {}).get("norm") for k in ("a", "b"))) for r in rows]
    points = [_ratio_point(x, lg, top, bottom) for x, lg in zip(ratios, logs)]
    pinned, text = [p for p, _ in points], [t for _, t in points]
    trace = {
        "type": "scatter",
        "mode": "markers",
        # scatter uses it only to stack, harmless here: every trace says its orientation
        "orientation": "h" if flat else "v",
        "name": "ratio B/A",
        "text": text,
        "customdata": [[plotly_text(r["name"]), r["badge"] if r["changed"] else ""] for r in rows],
        "marker": {
            "symbol": "diamond",
            "size": 9,
            "color": [ratio_color(x) for x in ratios],
            "line": {"color": "#000", "width": 1},
        },
        "hovertemplate": "<b>%{customdata[0]}</b><br>B/A = %{text}<br>%{customdata[1]}"
        "<extra></extra>",
    }
    if flat:
        return {**trace, "y": names, "x": pinned, "xaxis": "x2"}
    return {**trace, "x": names, "y": pinned, "yaxis": "y2"}


def _ratio_point(x: float, lg: float, top: float, bottom: float) -> tuple[float | None, str]:
    """Where a ratio's marker goes on the ratio axis, and its text."""
    if math.isnan(x) and math.isfinite(lg):  # beyond float64: its end of the axis
        return (top if lg > 0 else bottom), f"≈1e{lg:+.0f} (beyond float64)"
    if math.isnan(x):
        return None, "no ratio"
    if x == math.inf:
        return top, "0.0 → gradient"
    return (bottom if x == 0 else x), f"{x:.3g}"


__all__ = ["compare_figure", "compare_rows"]
