"""Compare mode's data, without widgets or torch: grouped rows, ratio colours, edge colours and
the statuses that changed between a baseline run (A) and a newer run (B).

Colours come from a diverging purple-orange scale (ColorBrewer PuOr, colour-blind safe) on
log10(B/A): purple where B's gradient is smaller, orange where it is larger, grey where the two
agree within 2x. An edge drawn only in B is light grey; an edge whose ratio cannot be formed (no
gradient or NaN/Inf on a side) is pink. Every string for HTML goes through `html_text`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..graph.nodes import GradEdge
from ..report.compare import compare_rows, norm_ratio
from ..vocabulary import STYLES, format_norm, html_text

#: (upper bound of log10(B/A), colour, legend label), smallest ratios first
RATIO_SCALE: tuple[tuple[float, str, str], ...] = (
    (-2.0, "#2d004b", "B/A < 1/100"),
    (-1.0, "#542788", "< 1/10"),
    (-math.log10(2), "#8073ac", "< 1/2"),
    (math.log10(2), "#6b6b6b", "B/A within 2x"),
    (1.0, "#e08214", "> 2"),
    (2.0, "#b35806", "> 10"),
    (math.inf, "#7f3b08", "> 100 or 0.0 → g"),
)
ONLY_B = "#c8c8c8"  # an edge of B that A's graph does not have
NO_RATIO = "#cc79a7"  # None or NaN/Inf on a side: no ratio

#: how a status reads in a change badge ("0.0 -> healthy"): vocabulary's short words, and
#: "absent" (a node one run does not have)
SHORT = {s.status: s.short for s in STYLES.values()} | {"absent": "absent"}


def ratio_color(ratio: float) -> str:
    """The scale's colour for `ratio` = B/A (inf: a gradient came back; NaN: no ratio).

    Example:
        >>> ratio_color(1.0), ratio_color(1000.0), ratio_color(0.05), ratio_color(math.nan)
        ('#6b6b6b', '#7f3b08', '#542788', '#cc79a7')
    """
    if math.isnan(ratio):
        return NO_RATIO
    if ratio == 0.0:
        return RATIO_SCALE[0][1]
    x = math.log10(ratio) if math.isfinite(ratio) else math.inf
    for upper, color, _ in RATIO_SCALE:
        if x < upper:
            return color
    return RATIO_SCALE[-1][1]


def ratio_legend() -> list[dict[str, Any]]:
    """Legend entries (the graph pane's format) for the edge colours of compare mode.

    Example:
        >>> [e["label"] for e in ratio_legend()][3]
        'B/A within 2x'
    """
    items = [
        {"status": f"ratio{i}", "label": lab, "color": c, "dash": ""}
        for i, (_, c, lab) in enumerate(RATIO_SCALE)
    ]
    items.append({"status": "ratio-none", "label": "no ratio", "color": NO_RATIO})
    items.append({"status": "ratio-only-b", "label": "edge only in B", "color": ONLY_B})
    return items


def edge_colors(
    edges_a: Iterable[GradEdge], edges_b: Iterable[GradEdge]
) -> dict[tuple[str, str], str]:
    """(src, dst) -> colour for every edge of B: by the ratio of B's edge norm over A's, matched
    by the stable ids; light grey for an edge only B has. An edge whose flow A or B did not
    measure (a run that measured another view's) has no ratio: it keeps its own look.

    Example:
        >>> from gradviz_widgets.graph.grad_graph import GradEdge
        >>> a = [GradEdge("x", "y", 1.0)]
        >>> edge_colors(a, [GradEdge("x", "y", 50.0), GradEdge("y", "z", 1.0)])
        {('x', 'y'): '#b35806', ('y', 'z'): '#c8c8c8'}
    """
    norms_a = {(e.src, e.dst): e.grad_norm for e in edges_a if e.measured}
    unmeasured_a = {(e.src, e.dst) for e in edges_a if not e.measured}
    out = {}
    for e in edges_b:
        key = (e.src, e.dst)
        if key in unmeasured_a or not e.measured:
            continue
        out[key] = ratio_color(norm_ratio(norms_a[key], e.grad_norm)) if key in norms_a else ONLY_B
    return out


def badge(status_a: str, status_b: str) -> str:
    """'0.0 → healthy': how a changed status reads in hover and lists.

    Example:
        >>> badge("zero", "healthy")
        '0.0 → healthy'
    """
    return f"{SHORT.get(status_a, status_a)} → {SHORT.get(status_b, status_b)}"


def status_changes(report_a: Any, report_b: Any) -> list[tuple[str, str, str]]:
    """(parameter, status in A, status in B) for each parameter whose status changed."""
    rows = compare_rows(report_a, report_b)
    return [(r["param"], r["status_a"], r["status_b"]) for r in rows if r["status_changed"]]


def run_label(report: Any, name: str | None = None) -> str:
    """A run in a few words: its explorer's `name` when it has one (a replayed step), device,
    loss (plain text).

    Example:
        >>> from types import SimpleNamespace as R
        >>> run_label(R(device="cpu", loss=2.5), "spike step 412")
        'spike step 412 · cpu · loss 2.5'
        >>> run_label(R(device="cpu", loss=2.5, params=[R(modified_by="clip_norm=0.01 at 10")]))
        'cpu · loss 2.5 · with clip_norm=0.01 at 10'
    """
    head = f"{name} · " if name else ""
    # a run made with modifiers says so: A is often an explorer whose modifier was removed since
    mods = dict.fromkeys(p.modified_by for p in getattr(report, "params", ()) if p.modified_by)
    tail = f" · with {', '.join(mods)}" if mods else ""
    return f"{head}{report.device} · loss {format_norm(report.loss)}{tail}"


def compare_html(
    report_a: Any,
    report_b: Any,
    limit: int = 12,
    names: tuple[str | None, str | None] = (None, None),
) -> str:
    """The compare line under the toolbar: A and B in words (`names`: their explorers' labels),
    the statuses that changed (each with its badge). User text is escaped.

    Example:
        >>> "<b>" in compare_html(report, report)   # doctest: +SKIP
        True
    """
    changes = status_changes(report_a, report_b)
    head = (
        f"<b>compare</b> A = {html_text(run_label(report_a, names[0]))} · "
        f"B = {html_text(run_label(report_b, names[1]))} · bars: A then B, ◆ ratio B/A; "
        "edges coloured by B/A"
    )
    if not changes:
        return f'<div class="gv-compare">{head}; no status changed</div>'
    items = ", ".join(
        f"<b>{html_text(name)}</b> {html_text(badge(a, b))}" for name, a, b in changes[:limit]
    )
    more = f", … {len(changes) - limit} more" if len(changes) > limit else ""
    return (
        f'<div class="gv-compare">{head}; {len(changes)} status change(s): '
        f'<span class="gv-status-changes">{items}{more}</span></div>'
    )


__all__ = [
    "NO_RATIO",
    "ONLY_B",
    "RATIO_SCALE",
    "badge",
    "compare_html",
    "edge_colors",
    "ratio_color",
    "ratio_legend",
    "run_label",
    "status_changes",
]
