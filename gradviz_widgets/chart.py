"""Bar-chart data for gradient norms on a log axis, and the Plotly figure that shows it.

Zero, None and NaN/Inf cannot sit on a log axis, so they get bars pinned to the floor (zero,
None) or the ceiling (NaN/Inf) of the axis, each with its own pattern and a text label: every
parameter gets a row, nothing is dropped.
"""

from __future__ import annotations

import math
from typing import Any

from .render import STATUS_STYLE, format_norm, plain_text
from .report import GradReport
from .stats import classify, combine_norms

PATTERNS = {"healthy": "", "vanishing": "/", "exploding": "\\", "nonfinite": "+", "zero": "x",
            "none": "."}


def bar_rows(report: GradReport, mode: str = "param") -> list[dict[str, Any]]:
    """One row per parameter (mode "param") or per module owning parameters (mode "module"):
    name, module, norm, status, norm_before.

    Example:
        >>> rows = bar_rows(report, "module")        # doctest: +SKIP
    """
    if mode == "param":
        return [{"name": p.name, "module": p.module, "norm": p.norm, "max_abs": p.max_abs,
                 "status": p.status, "norm_before": p.norm_before,
                 "reason": p.none_reason or _zero_share(p.zero_fraction)}
                for p in report.params]
    if mode != "module":
        raise ValueError(f"mode must be 'param' or 'module', got {mode!r}")
    groups: dict[str, list] = {}
    for p in report.params:
        groups.setdefault(p.module, []).append(p)
    rows = []
    for module, ps in groups.items():
        norm = combine_norms([p.norm for p in ps])
        maxes = [p.max_abs for p in ps if p.max_abs is not None]
        before = combine_norms([p.norm_before if p.norm_before is not None else p.norm for p in ps])
        rows.append({"name": module or "(root)", "module": module, "norm": norm,
                     "max_abs": max(maxes) if maxes else None,
                     "status": classify(norm, max(maxes) if maxes else None, report.thresholds),
                     "norm_before": before if any(p.norm_before is not None for p in ps) else None,
                     "reason": None})
    return rows


def _zero_share(fraction: float | None) -> str | None:
    if not fraction:
        return None
    return f"{fraction:.0%} of its gradient elements are exactly 0.0"


def axis_range(rows: list[dict], report: GradReport) -> tuple[float, float]:
    """log10 floor and ceiling: finite positive norms and both thresholds, padded."""
    values = [r["norm"] for r in rows if r["norm"] and math.isfinite(r["norm"]) and r["norm"] > 0]
    values += [report.thresholds.vanishing, report.thresholds.exploding]
    lo, hi = math.log10(min(values)), math.log10(max(values))
    return math.floor(lo) - 1, math.ceil(hi) + 1


def figure_dict(report: GradReport, mode: str = "param", selected_module: str | None = None) -> dict:
    """The whole figure as a plain dict (data + layout), ready for go.FigureWidget."""
    rows = bar_rows(report, mode)
    lo, hi = axis_range(rows, report)
    floor, ceil = 10 ** (lo + 0.3), 10 ** (hi - 0.3)
    y, text, colors, fills, patterns, widths = [], [], [], [], [], []
    for r in rows:
        n, s = r["norm"], r["status"]
        y.append(floor if s in ("zero", "none") else ceil if s == "nonfinite" else n)
        text.append(format_norm(n) if s != "none" else "None")
        fill, border, _, _ = STATUS_STYLE[s]
        colors.append(border)
        fills.append(fill if s in ("zero", "none") else border)
        patterns.append(PATTERNS[s])
        widths.append(3 if selected_module is not None and r["module"] == selected_module else 1)
    # names are user text: Plotly renders <b>, <br>, <a> in ticks and hover, so show them escaped
    x = [[plotly_text(r["module"] or "(root)") for r in rows],
         [plotly_text(_short(r["name"], r["module"])) for r in rows]] \
        if mode == "param" else [plotly_text(r["name"]) for r in rows]
    # [0] name and [1] module stay raw (a bar click looks them up); [3] and [4] are shown
    custom = [[r["name"], r["module"], r["status"], plotly_text(r["reason"] or ""), plotly_text(r["name"])]
              for r in rows]
    data = [{
        "type": "bar", "name": "gradient norm", "x": x, "y": y, "text": text,
        "textposition": "outside", "cliponaxis": False, "customdata": custom,
        "marker": {"color": fills, "line": {"color": colors, "width": widths},
                   "pattern": {"shape": patterns, "fgcolor": colors, "size": 6}},
        "hovertemplate": "<b>%{customdata[4]}</b><br>‖g‖ = %{text}<br>status: %{customdata[2]}"
                         "<br>%{customdata[3]}<extra></extra>",
    }]
    if any(r["norm_before"] is not None for r in rows):
        before = [r["norm_before"] if r["norm_before"] else floor for r in rows]
        data.append({"type": "bar", "name": "before modifiers", "x": x, "y": before,
                     "marker": {"color": "rgba(0,0,0,0)", "line": {"color": "#555", "width": 1.5}},
                     "hovertemplate": "before modifiers: %{y:.3g}<extra></extra>"})
    th = report.thresholds
    layout = {
        "barmode": "overlay" if len(data) > 1 else "relative",
        "yaxis": {"type": "log", "range": [lo, hi], "title": {"text": "gradient L2 norm (log)"},
                  "exponentformat": "power"},
        "xaxis": {"tickangle": -45, "automargin": True},
        "margin": {"l": 60, "r": 10, "t": 30, "b": 10},
        "height": 460, "showlegend": len(data) > 1, "bargap": 0.15,
        "title": {"text": "per-parameter gradient norms" if mode == "param"
                  else "per-module gradient norms", "font": {"size": 13}},
        "shapes": [_hline(th.vanishing, "#0072b2"), _hline(th.exploding, "#e69f00")],
        "annotations": [_hlabel(th.vanishing, f"vanishing < {th.vanishing:g}", "#0072b2"),
                        _hlabel(th.exploding, f"exploding > {th.exploding:g}", "#e69f00")],
    }
    return {"data": data, "layout": layout}


def plotly_text(text: object) -> str:
    """User text for Plotly's pseudo-HTML (ticks, hover): `&`, `<`, `>` as entities, which
    Plotly decodes for display (it leaves `&quot;` as typed, so quotes stay as they are).

    Example:
        >>> plotly_text('<b>"x"</b>')
        '&lt;b&gt;"x"&lt;/b&gt;'
    """
    return plain_text(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _short(name: str, module: str) -> str:
    return name[len(module) + 1:] if module and name.startswith(module + ".") else name


def _hline(y: float, color: str) -> dict:
    return {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": y, "y1": y,
            "line": {"color": color, "dash": "dash", "width": 1}}


def _hlabel(y: float, text: str, color: str) -> dict:
    return {"xref": "paper", "x": 1, "y": math.log10(y), "text": text, "showarrow": False,
            "xanchor": "right", "yanchor": "bottom", "font": {"size": 10, "color": color}}
