"""Bar-chart data for gradient norms on a log axis, and the Plotly figure that shows it.

Zero, None and NaN/Inf cannot sit on a log axis, so they get bars pinned to the floor (zero,
None) or the ceiling (NaN/Inf) of the axis, each with its own pattern and a text label: every
parameter gets a row, nothing is dropped.
"""

from __future__ import annotations

import html
import math
import unicodedata
from typing import Any

from ..report.grad_report import GradReport
from ..vocabulary import STYLES, classify, combine_norms, format_norm, plain_text, style
from .elide import elide_middle, elide_parts

# up to this many bars stand upright (names as two-level ticks below); more lie flat, one
# row each, and the figure grows taller so tick labels never overlap (the widget scrolls it)
UPRIGHT_MAX = 30
ROW_PX = 18  # height of one flat bar's row: a 10-12 px tick label with room to spare
ROW_MIN_PX = 14.4  # the tightest row still readable (1.3 x an 11 px label): flat charts of
# up to ~40 bars squeeze their rows down to it to be seen whole in their box
CHART_BOX_PX = 680  # max height of the box the widget shows the chart in (taller charts
# scroll there): about the graph column beside it, and a 1280x800 notebook's visible height
BASE_HEIGHT = 460
HEADER_PX = 112  # flat charts of compare mode: title, legend, then norm axis title and ticks
FLAT_HEADER_PX = 72  # flat charts: title, a note (axis and thresholds), the norm axis ticks
FOOT_PX = 10  # flat charts: margin under the last row
NAME_CHARS = 40  # longer names are elided in the middle on the axis (hover: the full name)
MODULE_CHARS = 24  # upright charts: module group labels, at most ~5 characters per bar
DEFAULT_WIDTH = 440  # px: the chart's width when the caller does not say (the widget's
# narrowest beside the graph): labels chosen for it stay readable on any wider chart
TICK_PX = 11  # font size of the name ticks
VALUE_PX = 11  # value labels over the bars; plotly shrinks one to its bar, below
HALO = "0 0 2px #fff, 0 0 2px #fff, 0 0 3px #fff"  # value labels stay legible over a threshold line
VALUE_MIN_PX = 10  # this it is hidden (uniformtext "hide"): legible, or not drawn at all
CHAR_EM = 0.62  # estimated width of a narrow character in em (wide CJK ones: 1 em)
PLOT_SIDES = 100  # px of an upright chart's width outside its plot: norm axis, margins
ROTATED_SLOT = 20  # px per bar at least for -45 degree ticks (0.7 * 20 > a 13 px line)
ROTATED_CHARS = 18  # longest rotated tick, characters: longer ones go on a flat chart
FLAT_SHARE = 0.45  # share of a flat chart's width its names may take
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


def chart_shape(count: int, upright: bool = True, header: int = HEADER_PX) -> dict[str, Any]:
    """Orientation and height for `count` bars: upright up to UPRIGHT_MAX (and when their
    names fit, `upright`), flat otherwise with one row per bar under a `header` px header:
    ROW_PX rows, squeezed down to ROW_MIN_PX when that shows the whole chart in its box
    (CHART_BOX_PX), else ROW_PX rows that scroll there, `hidden` of them below the box.

    Example:
        >>> chart_shape(8)
        {'orientation': 'v', 'height': 460}
        >>> chart_shape(150)["orientation"], chart_shape(150)["height"]
        ('h', 2822)
        >>> chart_shape(41, upright=False, header=FLAT_HEADER_PX)["height"] <= CHART_BOX_PX
        True
    """
    if count <= UPRIGHT_MAX and upright:
        return {"orientation": "v", "height": BASE_HEIGHT}
    room = CHART_BOX_PX - 2 - header - FOOT_PX  # the box's border: 1 px each side
    row = min(float(ROW_PX), room / max(count, 1))
    if row < ROW_MIN_PX:
        row = ROW_PX  # too many to see whole: readable rows that scroll
    height = max(BASE_HEIGHT, math.ceil(row * count) + header + FOOT_PX)
    hidden = count - int(room // row) if height > CHART_BOX_PX - 2 else 0
    return {"orientation": "h", "height": height, "header": header, "hidden": max(hidden, 0)}


def figure_dict(
    report: GradReport,
    mode: str = "param",
    selected_module: str | None = None,
    width: int | None = None,
) -> dict[str, Any]:
    """The whole figure as a plain dict (data + layout), ready for go.FigureWidget; its labels
    are chosen to be readable at `width` px (the chart's real width; default DEFAULT_WIDTH)."""
    rows = bar_rows(report, mode)
    lo, hi = axis_range(rows, report)
    floor, ceil = 10 ** (lo + 0.3), 10 ** (hi - 0.3)
    plan = label_plan(rows, mode, width or DEFAULT_WIDTH)
    shape, names, flat = plan["shape"], plan["names"], plan["shape"]["orientation"] == "h"
    data = [_placed(_norm_bar(rows, floor, ceil, shape, selected_module), names, None, flat)]
    if any(r["norm_before"] is not None for r in rows):
        before = [r["norm_before"] if r["norm_before"] else floor for r in rows]
        texts = [
            format_norm(r["norm_before"]) if r["norm_before"] is not None else "—" for r in rows
        ]
        changed = [r["norm_before"] is not None for r in rows]
        data.append(_placed(_before_bar(shape, texts, changed), names, before, flat))
    layout = figure_layout(report, mode, (lo, hi), shape, multi=len(data) > 1)
    layout["xaxis" if not flat else "yaxis"]["tickangle"] = plan["tickangle"]
    return {"data": data, "layout": layout}


def empty_figure(text: str) -> dict[str, Any]:
    """A chart with no bars that says why (`text`, shown as text): before any run succeeded,
    in place of plotly's empty axes.

    Example:
        >>> empty_figure("No run yet")["layout"]["annotations"][0]["text"]
        'No run yet'
    """
    hidden = {"visible": False}
    note = {
        "text": plotly_text(text),
        "xref": "paper",
        "yref": "paper",
        "x": 0.5,
        "y": 0.5,
        "showarrow": False,
        "font": {"size": 13, "color": "#555"},
    }
    return {
        "data": [],
        "layout": {"xaxis": hidden, "yaxis": hidden, "annotations": [note], "height": 200},
    }


def label_plan(rows: list[dict[str, Any]], mode: str, width: int) -> dict[str, Any]:
    """Shape, category names and tick angle of a chart `width` px wide: upright bars when
    every name fits under its bar (per-parameter: module groups, then weight/bias), else flat
    rows with one short distinct name each (short_names; the hover has the full name).

    Example:
        >>> rows = [{"name": f"h.{i}.fc.weight", "module": f"h.{i}.fc"} for i in range(18)]
        >>> label_plan(rows[:2], "param", 440)["names"]
        [['h.0.fc', 'h.1.fc'], ['weight', 'weight']]
        >>> label_plan(rows, "param", 440)["names"][:2]
        ['h.0.fc.weight', 'h.1.fc.weight']
    """
    upright = _upright_names(rows, mode, width) if len(rows) <= UPRIGHT_MAX else None
    if upright is not None:
        names, angle = upright
        return {"shape": chart_shape(len(rows)), "names": names, "tickangle": angle}
    limit = max(16, min(NAME_CHARS, int(width * FLAT_SHARE / (CHAR_EM * TICK_PX))))
    fitted = fitted_names([r["name"] for r in rows], limit, params=mode == "param")
    names = distinct([plotly_text(n) for n in fitted])
    shape = chart_shape(len(rows), upright=False, header=FLAT_HEADER_PX)
    return {"shape": shape, "names": names, "tickangle": 0}


def _upright_names(
    rows: list[dict[str, Any]], mode: str, width: int
) -> tuple[list[Any], int] | None:
    """Category names of upright bars and their tick angle; None when some name would not
    fit its bar (or its module's bars, for the group row) at `width` px."""
    slot = (width - PLOT_SIDES) / max(len(rows), 1)
    if mode != "param":
        names = distinct([plotly_text(n) for n in short_names([r["name"] for r in rows])])
        angle = tick_angle(names, slot)
        return None if angle is None else (names, angle)
    modules = [r["module"] for r in rows]
    uniq = list(dict.fromkeys(modules))
    groups = dict(zip(uniq, distinct([plotly_text(n) for n in short_names(uniq)])))
    for module, label in groups.items():
        if text_px(label) > modules.count(module) * slot - 6:
            return None  # a module's name is wider than its bars: not identifiable
    labels = [groups[m] for m in modules]
    inner = [plotly_text(elide_middle(_short(r["name"], r["module"]), NAME_CHARS)) for r in rows]
    names = distinct(inner, labels)
    angle = tick_angle(names, slot)
    return None if angle is None else ([labels, names], angle)


def tick_angle(labels: list[str], slot: float) -> int | None:
    """0 when every label fits its `slot` px across, -45 when they fit rotated, else None.

    Example:
        >>> tick_angle(["weight", "bias"], 60), tick_angle(["weight"], 24), tick_angle(["w"], 9)
        (0, -45, None)
    """
    if all(text_px(t) <= slot - 4 for t in labels):
        return 0
    longest = max((len(html.unescape(t)) for t in labels), default=0)
    return -45 if slot >= ROTATED_SLOT and longest <= ROTATED_CHARS else None


def text_px(text: str, size: float = TICK_PX) -> float:
    """Estimated width in px of `text` (Plotly text: entities count as one character) at
    font `size`: wide (CJK) characters 1 em, others CHAR_EM, a little generous for sans.

    Example:
        >>> round(text_px("weight")), round(text_px("中文"))
        (41, 22)
    """
    plain = html.unescape(text)
    wide = sum(unicodedata.east_asian_width(c) in "WF" for c in plain)
    return size * (wide + CHAR_EM * (len(plain) - wide))


def fitted_names(names: list[str], limit: int, params: bool = False) -> list[str]:
    """Each name as a chart row shows it in `limit` characters, every row by one rule: the
    leading parts all names share left out (`common_parts`), then words left out from the
    middle (elide.py: never the first part left, so "encoder." / "decoder." stay), else cut
    in the middle. (Each row's shortest distinct suffix read "block.0.layer.1.….wi.weight"
    for T5's encoder beside "decoder.block.0…" rows: which half it was, the reader had to
    guess.)

    Example:
        >>> fitted_names([f"{s}.block.{i}.layer.0.SelfAttention.q.weight"
        ...               for s in ("encoder", "decoder") for i in (0, 1)], 31)[1:3]
        ['encoder.….1.layer.0.….q.weight', 'decoder.….0.layer.0.….q.weight']
        >>> fitted_names(["model.h.0.attn.weight", "model.h.1.attn.weight"], 31, params=True)
        ['h.0.attn.weight', 'h.1.attn.weight']
    """
    common = common_parts(names, keep=2 if params else 1)
    rest = [".".join(n.split(".")[common:]) or "(root)" for n in names]
    return [elide_middle(n, limit) for n in elide_parts(rest, limit)]


def common_parts(names: list[str], keep: int = 1) -> int:
    """How many leading dotted parts every name shares, leaving each at least `keep` parts
    (and more when the first part left would be a bare index: "h.0.attn", not "0.attn").

    Example:
        >>> common_parts(["transformer.h.0.mlp.weight", "transformer.h.1.mlp.weight"])
        1
    """
    split = [n.split(".") for n in names]
    if len(split) < 2:
        return 0
    shortest = min(len(p) for p in split)
    k = 0
    while k < shortest - keep and all(p[k] == split[0][k] for p in split):
        k += 1
    while k > 0 and any(p[k].isdigit() for p in split):
        k -= 1
    return k


def short_names(names: list[str], params: bool = False) -> list[str]:
    """The shortest dotted suffix of each name that no other name ends with, one more part
    when it starts with a bare index ("h.0.attn" rather than "0.attn"), and for parameters
    (`params`) at least the owning module's last part ("wte.weight", never "weight").

    Example:
        >>> short_names(["transformer.wte.weight", "transformer.h.0.attn.c_attn.weight",
        ...              "transformer.h.1.attn.c_attn.weight"], params=True)
        ['wte.weight', 'h.0.attn.c_attn.weight', 'h.1.attn.c_attn.weight']
    """
    split = [(n or "(root)").split(".") for n in names]
    counts: dict[str, int] = {}
    for parts in split:
        for k in range(1, len(parts) + 1):
            tail = ".".join(parts[-k:])
            counts[tail] = counts.get(tail, 0) + 1
    out = []
    for parts in split:
        k = min(2 if params else 1, len(parts))
        while k < len(parts) and counts[".".join(parts[-k:])] > 1:
            k += 1
        if k < len(parts) and parts[-k].isdigit():
            k += 1
        out.append(".".join(parts[-k:]))
    return out


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
        "textfont": {"size": VALUE_PX, "shadow": HALO},
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


def _before_bar(shape: dict[str, Any], texts: list[str], changed: list[bool]) -> dict[str, Any]:
    """Outlines of the norms before modifiers, on the bars a modifier changed only (the others'
    sat at the axis floor as dark stubs); hover shows Python's text (format_norm)."""
    return {
        "type": "bar",
        "name": "before modifiers",
        "orientation": shape["orientation"],
        "marker": {
            "color": "rgba(0,0,0,0)",
            "line": {"color": "#555", "width": [1.5 if c else 0 for c in changed]},
        },
        "hovertext": texts,
        "hovertemplate": "before modifiers: %{hovertext}<extra></extra>",
    }


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


def figure_layout(
    report: GradReport,
    mode: str,
    span: tuple[float, float],
    shape: dict[str, Any],
    multi: bool = False,
) -> dict[str, Any]:
    """The layout of a chart of `shape` (chart_shape) whose norm axis spans `span` (log10):
    axes, margins, title, threshold lines (under the bars and their haloed value labels,
    which they would cross) and their labels (over the bars, on a pale box: never hidden by a
    bar); also compare mode's base (render/chart_compare.py)."""
    lines = report.thresholds.lines()  # a check turned off draws no line
    colours = {"vanishing": _VAN, "exploding": _EXP}
    signs = {"vanishing": "<", "exploding": ">"}
    texts = {k: f"{k} {signs[k]} {v:g}" for k, v in lines.items()}
    flat = shape["orientation"] == "h"
    header = shape.get("header", HEADER_PX)
    compact = flat and header < HEADER_PX  # the axis title goes into the note under the title
    norm_axis, name_axis = _axes(span, flat, compact)
    notes = (["gradient L2 norm, log axis"] if compact else []) + (
        [f"dashed: {', '.join(texts.values())}"] if flat and texts else []
    )
    return {
        "barmode": "overlay" if multi else "relative",
        # the whole row / column of a bar hovers and clicks it: a zero or None bar is a few px
        # tall under its label, and "closest" picked nothing on the label (no click)
        "hovermode": "y" if flat else "x",
        "xaxis": norm_axis if flat else name_axis,
        "yaxis": name_axis if flat else norm_axis,
        "margin": {
            "l": 10 if flat else 60,
            "r": 40 if flat else 10,
            "t": header if flat else 30,
            "b": FOOT_PX if flat else 10,
        },
        "height": shape["height"],
        "showlegend": multi,
        "bargap": 0.15,
        # value labels: shrunk to their bar by plotly, hidden below VALUE_MIN_PX (never tiny)
        "uniformtext": {"mode": "hide", "minsize": VALUE_MIN_PX},
        "title": _title(mode, notes, shape["height"]),
        "shapes": [_line(v, colours[k], flat) for k, v in lines.items()],
        "annotations": _more_below(shape)
        if flat
        else [_hlabel(v, texts[k], colours[k]) for k, v in lines.items()],
    }


def _axes(
    span: tuple[float, float], flat: bool, compact: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the norm axis, the name axis): log norms, one name per row on flat charts (first on
    top); `compact`: the norm axis's title is in the note under the chart's title instead."""
    norm_axis: dict[str, Any] = {
        "type": "log",
        "range": list(span),
        "title": {"text": "" if compact else "gradient L2 norm (log)"},
        "exponentformat": "power",
    }
    name_axis: dict[str, Any] = {"automargin": True, "tickfont": {"size": TICK_PX}}
    if flat:  # first row on top, every row labelled (no thinning: one row per name)
        name_axis.update(autorange="reversed", dtick=1, type="category")
        norm_axis["side"] = "top"
        norm_axis["tickfont"] = {"size": TICK_PX}
    else:
        name_axis["tickangle"] = -45
    return norm_axis, name_axis


def _title(mode: str, notes: list[str], height: int) -> dict[str, Any]:
    """The chart's title and its notes, at the very top, in px from the top whatever the
    height: the norm axis (title and ticks, on top of flat charts) sits under it."""
    what = "per-parameter gradient norms" if mode == "param" else "per-module gradient norms"
    return {
        "text": what + (f"<br><sub>{' · '.join(notes)}</sub>" if notes else ""),
        "font": {"size": 13},
        "x": 0.01,
        "xanchor": "left",
        "y": 1 - 10 / height,
        "yanchor": "top",
        "yref": "container",
    }


def _more_below(shape: dict[str, Any]) -> list[dict[str, Any]]:
    """A flat chart taller than its box: a hint at the box's bottom edge that `hidden` rows
    follow (the page's overlay scrollbars are invisible until used)."""
    hidden = shape.get("hidden", 0)
    if not hidden:
        return []
    header, height = shape.get("header", HEADER_PX), shape["height"]
    at = CHART_BOX_PX - 2 - 11  # px from the figure's top: the last visible row
    return [
        {
            "xref": "paper",
            "x": 1,
            "yref": "paper",
            "y": 1 - (at - header) / (height - header - FOOT_PX),
            "text": f"▼ {hidden} more below: scroll the chart",
            "showarrow": False,
            "xanchor": "right",
            "yanchor": "middle",
            "font": {"size": 12, "color": "#222"},
            "bgcolor": "rgba(255,255,204,0.95)",
            "bordercolor": "#888",
            "borderwidth": 1,
            "borderpad": 3,
        }
    ]


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
    line = {"type": "line", "layer": "between", "line": style}
    if flat:
        return {**line, "yref": "paper", "y0": 0, "y1": 1, "x0": v, "x1": v}
    return {**line, "xref": "paper", "x0": 0, "x1": 1, "y0": v, "y1": v}


def _hlabel(y: float, text: str, color: str) -> dict[str, Any]:
    return {
        "xref": "paper",
        "x": 1,
        "y": math.log10(y),
        "text": text,
        "showarrow": False,
        "xanchor": "right",
        "yanchor": "bottom",
        "font": {"size": 11, "color": color},
        # annotations are drawn over the traces; the box keeps the text legible on a bar
        "bgcolor": "rgba(255,255,255,0.9)",
        "bordercolor": color,
        "borderwidth": 1,
        "borderpad": 2,
    }
