"""Bar-chart data for gradient norms on a log axis, and the Plotly figure that shows it.

Zero, None and NaN/Inf cannot sit on a log axis, so they get bars pinned to the floor (zero,
None) or the ceiling (NaN/Inf) of the axis, each with its own pattern and a text label: every
parameter gets a row, nothing is dropped.
"""

from __future__ import annotations

import math
from typing import Any

from ..report.grad_report import GradReport
from ..vocabulary import STYLES, classify, combine_norms, format_norm, plain_text, style

# up to this many bars stand upright (names as two-level ticks below); more lie flat, one
# row each, and the figure grows taller so tick labels never overlap (the widget scrolls it)
UPRIGHT_MAX = 30
ROW_PX = 18  # height of one flat bar's row: a 10-12 px tick label with room to spare
BASE_HEIGHT = 460
HEADER_PX = 112  # flat charts: title, thresholds note, then the norm axis title and ticks
NAME_CHARS = 40  # longer names are elided in the middle on the axis (hover: the full name)
MODULE_CHARS = 24  # upright charts: module group labels, at most ~5 characters per bar
PATTERN_INK = "#333"  # one colour for every pattern's strokes and outlines (plotly's
# colour checks warn "Invalid color specifier: Array(n)" for per-bar arrays there; and the
# default template's pattern fillmode "overlay" takes the per-bar fill array as one colour)
#: status -> Plotly bar pattern (vocabulary.STYLES; kept for older callers)
PATTERNS = {k: s.pattern for k, s in STYLES.items()}
_VAN, _EXP = STYLES["vanishing"].line, STYLES["exploding"].line  # the threshold lines


def bar_rows(report: GradReport, mode: str = "param") -> list[dict[str, Any]]:
    """One row per parameter (mode "param") or per module owning parameters (mode "module"):
    name, module, norm, status, norm_before.

    Example:
        >>> rows = bar_rows(report, "module")        # doctest: +SKIP
    """
    if mode == "param":
        return [
            {
                "name": p.name,
                "module": p.module,
                "norm": p.norm,
                "max_abs": p.max_abs,
                "status": p.status,
                "norm_before": p.norm_before,
                "reason": p.none_reason or _zero_share(p.zero_fraction),
            }
            for p in report.params
        ]
    if mode != "module":
        raise ValueError(f"mode must be 'param' or 'module', got {mode!r}")
    groups: dict[str, list[Any]] = {}
    for p in report.params:
        groups.setdefault(p.module, []).append(p)
    rows = []
    for module, ps in groups.items():
        norm = combine_norms([p.norm for p in ps])
        maxes = [p.max_abs for p in ps if p.max_abs is not None]
        before = combine_norms([p.norm_before if p.norm_before is not None else p.norm for p in ps])
        rows.append(
            {
                "name": module or "(root)",
                "module": module,
                "norm": norm,
                "max_abs": max(maxes) if maxes else None,
                "status": classify(norm, max(maxes) if maxes else None, report.thresholds),
                "norm_before": before if any(p.norm_before is not None for p in ps) else None,
                "reason": None,
            }
        )
    return rows


def _zero_share(fraction: float | None) -> str | None:
    if not fraction:
        return None
    return f"{fraction:.0%} of its gradient elements are exactly 0.0"


def axis_range(rows: list[dict[str, Any]], report: GradReport) -> tuple[float, float]:
    """log10 floor and ceiling: finite positive norms and both thresholds, padded."""
    values = [r["norm"] for r in rows if r["norm"] and math.isfinite(r["norm"]) and r["norm"] > 0]
    values += list(report.thresholds.lines().values())
    if not values:  # no norm to place and both checks off
        return -9, 2
    lo, hi = math.log10(min(values)), math.log10(max(values))
    return math.floor(lo) - 1, math.ceil(hi) + 1


def chart_shape(count: int) -> dict[str, Any]:
    """Orientation and height for `count` bars: upright up to UPRIGHT_MAX, flat beyond with
    one ROW_PX row per bar.

    Example:
        >>> chart_shape(8)
        {'orientation': 'v', 'height': 460}
        >>> chart_shape(150)["orientation"], chart_shape(150)["height"]
        ('h', 2832)
    """
    if count <= UPRIGHT_MAX:
        return {"orientation": "v", "height": BASE_HEIGHT}
    return {"orientation": "h", "height": max(BASE_HEIGHT, ROW_PX * count + HEADER_PX + 20)}


def figure_dict(
    report: GradReport, mode: str = "param", selected_module: str | None = None
) -> dict[str, Any]:
    """The whole figure as a plain dict (data + layout), ready for go.FigureWidget."""
    rows = bar_rows(report, mode)
    lo, hi = axis_range(rows, report)
    floor, ceil = 10 ** (lo + 0.3), 10 ** (hi - 0.3)
    shape = chart_shape(len(rows))
    flat = shape["orientation"] == "h"
    names = _names(rows, mode, flat)
    data = [_placed(_norm_bar(rows, floor, ceil, shape, selected_module), names, None, flat)]
    if any(r["norm_before"] is not None for r in rows):
        before = [r["norm_before"] if r["norm_before"] else floor for r in rows]
        texts = [
            format_norm(r["norm_before"]) if r["norm_before"] is not None else "—" for r in rows
        ]
        data.append(_placed(_before_bar(shape, texts), names, before, flat))
    layout = _layout(report, mode, lo, hi, shape, multi=len(data) > 1)
    return {"data": data, "layout": layout}


def _norm_bar(
    rows: list[dict[str, Any]],
    floor: float,
    ceil: float,
    shape: dict[str, Any],
    selected_module: str | None,
) -> dict[str, Any]:
    """The bars of the norms (values under "_values"), styled per status (vocabulary.STYLES):
    zero and None pinned to the floor, NaN/Inf to the ceiling."""
    values, text, fills, patterns, widths = [], [], [], [], []
    for r in rows:
        n, s = r["norm"], r["status"]
        look = style(s)
        values.append(floor if s in ("zero", "none") else ceil if s == "nonfinite" else n)
        text.append(format_norm(n) if s != "none" else "None")
        fills.append(look.fill if s in ("zero", "none") else look.line)
        patterns.append(look.pattern)
        widths.append(3 if _inside(r["module"], selected_module) else 1)
    # [0] name and [1] module stay raw (a bar click looks them up); [3] and [4] are shown
    custom = [
        [
            r["name"],
            r["module"],
            r["status"],
            plotly_text(r["reason"] or ""),
            plotly_text(r["name"]),
        ]
        for r in rows
    ]
    return {
        "type": "bar",
        "name": "gradient norm",
        "orientation": shape["orientation"],
        "text": text,
        "textposition": "outside",
        "cliponaxis": False,
        "customdata": custom,
        "marker": {
            "color": fills,
            "line": {"color": PATTERN_INK, "width": widths},
            "pattern": {
                "shape": patterns,
                "fgcolor": PATTERN_INK,
                "size": 6,
                "fillmode": "replace",
            },
        },
        "hovertemplate": "<b>%{customdata[4]}</b><br>‖g‖ = %{text}<br>status: %{customdata[2]}"
        "<br>%{customdata[3]}<extra></extra>",
        "_values": values,
    }


def _inside(module: str, selected: str | None) -> bool:
    """Whether a bar of `module` belongs to the selected module: itself or, for a container
    (`h.0.attn`), any module inside it (the root: its own parameters only)."""
    if selected is None:
        return False
    return module == selected or (bool(selected) and module.startswith(selected + "."))


def _before_bar(shape: dict[str, Any], texts: list[str]) -> dict[str, Any]:
    """Outlines of the norms before modifiers; hover shows Python's text (format_norm)."""
    return {
        "type": "bar",
        "name": "before modifiers",
        "orientation": shape["orientation"],
        "marker": {"color": "rgba(0,0,0,0)", "line": {"color": "#555", "width": 1.5}},
        "hovertext": texts,
        "hovertemplate": "before modifiers: %{hovertext}<extra></extra>",
    }


def _names(rows: list[dict[str, Any]], mode: str, flat: bool) -> list[Any]:
    """Category labels; names are user text: Plotly renders <b>, <br>, <a> in ticks and
    hover, so they are escaped. Upright per-parameter bars get two levels (module, name)."""
    if mode == "param" and not flat:
        labels = module_labels([r["module"] for r in rows])
        modules = [labels[r["module"]] for r in rows]
        return [
            modules,
            distinct(
                [plotly_text(elide_middle(_short(r["name"], r["module"]))) for r in rows], modules
            ),
        ]
    return distinct([plotly_text(elide_middle(r["name"])) for r in rows])


def module_labels(modules: list[str]) -> dict[str, str]:
    """The group label of each module on an upright per-parameter chart: about the width of
    its bars (a long name never smears into the next group), but never the label of another
    module. Plotly groups bars by that label, so two modules elided alike
    ("transformer.h.0.attn.c_proj" and "transformer.h.1.mlp.c_proj" both "trans…c_proj")
    had their bars gathered out of the model's order: such a module gets more of its name.

    Example:
        >>> names = ["transformer.h.0.attn.c_proj", "transformer.h.0.mlp.c_proj"]
        >>> list(module_labels([n for n in names for _ in "wb"]).values())
        ['trans…c_proj', 'transfo…p.c_proj']
    """
    sizes: dict[str, int] = {}
    for m in modules:
        sizes[m] = sizes.get(m, 0) + 1
    out: dict[str, str] = {}
    taken: set[str] = set()
    for m, size in sizes.items():
        text, limit = m or "(root)", min(MODULE_CHARS, 5 * size + 2)
        shown = plotly_text(elide_middle(text, limit))
        while shown in taken and limit < len(text):
            limit += 4
            shown = plotly_text(elide_middle(text, limit))
        label, k = shown, 1
        while shown in taken:  # alike even in full (names that sanitise alike)
            k += 1
            shown = f"{label} ({k})"
        taken.add(shown)
        out[m] = shown
    return out


def elide_middle(text: str, limit: int = NAME_CHARS) -> str:
    """`text` shortened to `limit` characters by an ellipsis in the middle: both ends of a
    long dotted name stay readable (the hover shows it whole).

    Example:
        >>> elide_middle("transformer.h.11.attn.c_attn.weight", 24)
        'transformer…_attn.weight'
    """
    if len(text) <= limit:
        return text
    head = (limit - 1) // 2
    tail = limit - 1 - head
    return text[:head] + "…" + text[len(text) - tail :]


def distinct(labels: list[str], groups: list[str] | None = None) -> list[str]:
    """Labels made distinct within their group: names that read alike once sanitised
    (control characters) still get a row each. Example:
        >>> distinct(["w\ufffd", "w\ufffd", "b"])
        ['w\ufffd', 'w\ufffd (2)', 'b']
    """
    seen: set[tuple[str, str]] = set()
    out = []
    for i, label in enumerate(labels):
        group, shown, k = groups[i] if groups else "", label, 1
        while (group, shown) in seen:
            k += 1
            shown = f"{label} ({k})"
        seen.add((group, shown))
        out.append(shown)
    return out


def _placed(
    trace: dict[str, Any], names: list[Any], values: list[Any] | None, flat: bool
) -> dict[str, Any]:
    """`trace` with names on the category axis and `values` (or its "_values") on the other."""
    trace = dict(trace)
    values = trace.pop("_values", values)
    return {**trace, "y": names, "x": values} if flat else {**trace, "x": names, "y": values}


def _layout(
    report: GradReport, mode: str, lo: float, hi: float, shape: dict[str, Any], multi: bool
) -> dict[str, Any]:
    lines = report.thresholds.lines()  # a check turned off draws no line
    colours = {"vanishing": _VAN, "exploding": _EXP}
    signs = {"vanishing": "<", "exploding": ">"}
    texts = {k: f"{k} {signs[k]} {v:g}" for k, v in lines.items()}
    flat = shape["orientation"] == "h"
    norm_axis = {
        "type": "log",
        "range": [lo, hi],
        "title": {"text": "gradient L2 norm (log)"},
        "exponentformat": "power",
    }
    name_axis: dict[str, Any] = {"automargin": True, "tickfont": {"size": 11}}
    if flat:  # first row on top, every row labelled (no thinning: one row per name)
        name_axis.update(autorange="reversed", dtick=1, type="category")
        norm_axis["side"] = "top"
    else:
        name_axis["tickangle"] = -45
    return {
        "barmode": "overlay" if multi else "relative",
        "xaxis": norm_axis if flat else name_axis,
        "yaxis": name_axis if flat else norm_axis,
        "margin": {
            "l": 10 if flat else 60,
            "r": 40 if flat else 10,
            "t": HEADER_PX if flat else 30,
            "b": 10,
        },
        "height": shape["height"],
        "showlegend": multi,
        "bargap": 0.15,
        "title": {
            "text": (
                "per-parameter gradient norms" if mode == "param" else "per-module gradient norms"
            )
            + (f"<br><sub>dashed: {', '.join(texts.values())}</sub>" if flat and texts else ""),
            "font": {"size": 13},
            # at the very top, in px from the top whatever the height: the norm axis (title and
            # ticks, on top of flat charts) sits under it, nothing overprints
            "x": 0.01,
            "xanchor": "left",
            "y": 1 - 10 / shape["height"],
            "yanchor": "top",
            "yref": "container",
        },
        "shapes": [_line(v, colours[k], flat) for k, v in lines.items()],
        "annotations": [] if flat else [_hlabel(v, texts[k], colours[k]) for k, v in lines.items()],
    }


def plotly_text(text: object) -> str:
    """User text for Plotly's pseudo-HTML (ticks, hover): `&`, `<`, `>` as entities, which
    Plotly decodes for display (it leaves `&quot;` as typed, so quotes stay as they are).

    Example:
        >>> plotly_text('<b>"x"</b>')
        '&lt;b&gt;"x"&lt;/b&gt;'
    """
    return plain_text(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _short(name: str, module: str) -> str:
    return name[len(module) + 1 :] if module and name.startswith(module + ".") else name


def _line(v: float, color: str, flat: bool) -> dict[str, Any]:
    """A threshold line across the plot: horizontal on upright bars, vertical on flat ones."""
    style = {"color": color, "dash": "dash", "width": 1}
    if flat:
        return {"type": "line", "yref": "paper", "y0": 0, "y1": 1, "x0": v, "x1": v, "line": style}
    return {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": v, "y1": v, "line": style}


def _hlabel(y: float, text: str, color: str) -> dict[str, Any]:
    return {
        "xref": "paper",
        "x": 1,
        "y": math.log10(y),
        "text": text,
        "showarrow": False,
        "xanchor": "right",
        "yanchor": "bottom",
        "font": {"size": 10, "color": color},
    }
