"""Figures of the GradWatch view as plain dicts (pure functions, testable without a browser):
the heat map of parameters x steps and the line chart of chosen parameters."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..render.chart import distinct, plotly_text, text_px
from ..render.elide import elide_middle
from ..vocabulary import OFF_SCALE, STATUSES, STYLES, Thresholds, format_norm, named_few, style
from .anomalies import NONFINITE_LOSS, SPIKE
from .events import NONE_WORDS, none_why
from .history import Overview
from .store import ParamInfo

MAX_LINES = 6
#: the symbol on NaN/Inf cells: they differ from exploding ones by more than their colour
NONFINITE_MARK = "✕"
#: NaN/Inf cells marked one by one up to this many; beyond, the first of each parameter's runs
MAX_MARKS = 20_000


def colorscale(zmin: float, zmax: float, thresholds: Thresholds) -> list[list]:
    """A log-norm colour scale whose bands change colour at the vanishing and exploding lines.

    Example:
        >>> colorscale(-10, 6, Thresholds())[0]
        [0.0, '#0072b2']
    """
    span = max(zmax - zmin, 1e-9)

    def at(v: float) -> float:
        return min(max((v - zmin) / span, 0.0), 1.0)

    lines = thresholds.lines()  # a check turned off moves its band edge to the scale's end
    van = at(math.log10(lines["vanishing"])) if "vanishing" in lines else 0.0
    exp = at(math.log10(lines["exploding"])) if "exploding" in lines else 1.0
    v_fill, v_line = STYLES["vanishing"].fill, STYLES["vanishing"].line
    h_fill, h_line = STYLES["healthy"].fill, STYLES["healthy"].line
    e_fill, e_line = STYLES["exploding"].fill, STYLES["exploding"].line
    return [
        [0.0, v_line],
        [van, v_fill],
        [van, h_fill],
        [max(exp, van), h_line],
        [max(exp, van), e_fill],
        [1.0, e_line],
    ]


def z_range(values: np.ndarray, thresholds: Thresholds) -> tuple[float, float]:
    finite = values[np.isfinite(values) & (values > 0)]
    logs = [math.log10(v) for v in thresholds.lines().values()]
    lo, hi = (min(logs) - 1, max(logs) + 1) if logs else (math.inf, -math.inf)
    if finite.size:
        lo, hi = min(lo, math.log10(finite.min())), max(hi, math.log10(finite.max()))
    if not math.isfinite(lo):  # no norm yet and both checks off
        lo, hi = -9, 2
    return math.floor(lo), math.ceil(hi)


#: characters of a heat map row's tick label (~300 px at Plotly's 12 px)
HEAT_LABEL_CHARS = 48
#: the lines' legend names are elided to this many characters (the hover keeps them whole)
LEGEND_CHARS = 32
#: px the heat map's colour bar needs right of its plot
COLORBAR_PX = 120
#: px of a heat-map row, and the tallest its rows stand together (more rows: thinner ones,
#: every k-th labelled: 212 rows of 16 px drew a 3,500 px map, its step axis 3 screens down)
ROW_PX, ROWS_PX, LABEL_ROW_PX = 16, 720, 12


def plot_frame(params: list[ParamInfo]) -> dict[str, int]:
    """The left and right margins both live figures share, so that their plots, and a step on
    them, line up (each had its own: a step stood ~130 px apart in the two): the widest
    heat-map label on the left (at least the lines' tick labels), the colour bar on the right
    (the lines' legend goes under their plot).

    Example:
        >>> plot_frame([ParamInfo(0, "w" * 60, "", (1,), 1, 0)])
        {'l': 374, 'r': 120}
    """
    labels = [elide_middle(p.name, HEAT_LABEL_CHARS) for p in params]
    return {"l": max([60] + [math.ceil(text_px(t, 12)) + 16 for t in labels]), "r": COLORBAR_PX}


def _step_range(overview: Overview) -> list[float] | None:
    """The step axis both figures draw: the heat map's columns, each `width` steps wide (the
    heat map's own autorange; the lines' envelope alone spans less)."""
    x = overview.bucket_steps()
    if not len(x):
        return None
    half = overview.width / 2
    return [float(x[0]) - half, float(x[-1]) + half]


def _norm_trace(
    x: list,
    names: list[str],
    z: np.ndarray,
    span: tuple[float, float],
    thresholds: Thresholds,
    where: str,
) -> dict:
    """The heat map's norm colours: log10 of each bucket's norm (`where`: `column_hover`)."""
    return {
        "type": "heatmap",
        "name": "log10 ‖g‖",
        "x": x,
        "y": names,
        "z": z,
        "zmin": span[0],
        "zmax": span[1],
        "colorscale": colorscale(span[0], span[1], thresholds),
        # in the right margin both figures keep alike (`plot_frame`)
        "colorbar": {
            "title": {"text": "log10 ‖g‖"},
            "len": 0.8,
            "thickness": 14,
            "x": 1.0,
            "xanchor": "left",
        },
        "hoverongaps": False,
        "hovertemplate": f"%{{y}}<br>{where}<br>log10 ‖g‖ = %{{z:.2f}}<extra></extra>",
    }


def _name_axis(params: list[ParamInfo], order: list[int], names: list[str]) -> dict:
    """The heat map's row axis: a long name (FSDP, LoRA wrappers) elided in its tick, whole in
    the hover (a 300-character name's tick took the figure's whole width for its margin); rows
    thinner than a label: every k-th labelled."""
    every = math.ceil(LABEL_ROW_PX / _row_px(len(names)))
    return {
        "autorange": "reversed",
        "automargin": False,  # the margin is `plot_frame`'s, the lines' too
        "type": "category",
        "tickmode": "array",
        "tickvals": names[::every],
        "ticktext": [
            plotly_text(elide_middle(params[i].name, HEAT_LABEL_CHARS)) for i in order[::every]
        ],
    }


def _row_px(rows: int) -> float:
    return min(ROW_PX, max(3.0, ROWS_PX / max(rows, 1)))


def module_order(params: list[ParamInfo]) -> list[int]:
    """Parameter indices grouped by module (modules in order of first appearance)."""
    first: dict[str, int] = {}
    for p in params:
        first.setdefault(p.module, len(first))
    return sorted(range(len(params)), key=lambda i: (first[params[i].module], i))


def heatmap_figure(
    overview: Overview,
    params: list[ParamInfo],
    thresholds: Thresholds,
    anomalies: list | None = None,
    spikes: list | None = None,
    events: list | None = None,
    frame: dict[str, int] | None = None,
) -> dict:
    """Parameters (rows, grouped by module) x buckets of steps; colour = log10 of the bucket's
    largest norm (smallest where it dipped below the vanishing line). None, 0.0 and NaN/Inf
    cells get their own colours on top (a None cell's hover says why, from the parameter
    `events`); anomalies are marked on the step axis, and each spike's first movers (up to 3
    rows) are outlined over the spike's steps."""
    order = module_order(params)[: overview.n_params]
    x = overview.bucket_steps().tolist()
    values = overview.cell_values()[:, order] if overview.used else np.zeros((0, len(order)))
    status = overview.status[: overview.used, order]
    zmin, zmax = z_range(values, thresholds)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(np.isfinite(values) & (values > 0), np.log10(values), np.nan).T
    names = distinct([plotly_text(params[i].name) for i in order])  # user text: data, never markup
    where = column_hover(overview.width)
    data = [_norm_trace(x, names, z, (zmin, zmax), thresholds, where)]
    why = _none_codes(events or [], [params[i].name for i in order], x)  # buckets x rows
    data += [t for s in OFF_SCALE for t in _special_traces(s, x, names, status, why, where)]
    data.append(nonfinite_marks(x, names, status, where))
    layout = {
        "title": {
            "text": f"gradient norms per parameter ({overview.width} step(s) per "
            "column: spikes and dips kept)",
            "font": {"size": 13},
        },
        "xaxis": {"title": {"text": "step"}},  # autorange: its columns, as `_step_range`
        "yaxis": _name_axis(params, order, names),
        "height": max(300, round(_row_px(len(names)) * len(names)) + 120),
        "margin": {**(frame or plot_frame(params)), "t": 40},
        "legend": {"orientation": "h", "y": -0.12, "x": 0},
        **_anomaly_marks(anomalies or [], _axis_span(overview)),
    }
    rows = {params[i].name: r for r, i in enumerate(order)}
    leads = _spike_leads(spikes or [], rows, overview.width)
    layout["shapes"] = layout["shapes"] + leads
    if leads:  # say what they are: a reader took them for an anomaly's parameters
        layout["title"]["text"] += (
            "<br><sub>red outlines: each spike's first movers (up to 3 rows)</sub>"
        )
        layout["margin"]["t"] = 56
    return {"data": data, "layout": layout}


def _spike_leads(spikes: list, rows: dict[str, int], width: int, limit: int = 40) -> list[dict]:
    """A rectangle around each spike's leading rows (the category axis counts rows 0, 1, ...)."""
    shapes = []
    for s in spikes[:limit]:
        for name in s.params[:3]:
            if name not in rows:
                continue
            shapes.append(
                {
                    "type": "rect",
                    "xref": "x",
                    "yref": "y",
                    "x0": s.step - width / 2,
                    "x1": s.end + width / 2,
                    "y0": rows[name] - 0.5,
                    "y1": rows[name] + 0.5,
                    "line": {"color": SPIKE_COLOR, "width": 2},
                    "name": "spike lead",
                }
            )
    return shapes


def column_hover(width: int) -> str:
    """A heat-map column in its hover: "step 200" where a column is one step (it said "steps
    from 200"), "steps from 200 (4 a column)" where it is several.

    Example:
        >>> column_hover(1), column_hover(4)
        ('step %{x}', 'steps from %{x} (4 a column)')
    """
    return "step %{x}" if width <= 1 else f"steps from %{{x}} ({width} a column)"


def _special_traces(
    s: str, x: list, names: list[str], status: np.ndarray, why: np.ndarray, where: str
) -> list[dict]:
    """Cells of status `s` (None, 0.0, NaN/Inf) in their own colour, over the norm colours;
    None cells one trace per reason (`why`: NONE_WORDS codes, buckets x rows), whose hover
    says it (a frozen stage and a forgotten layer read alike)."""
    colour, label = STYLES[s].line, STYLES[s].label
    cells = status == STATUSES.index(s)
    parts = [(cells, label)]
    if s == "none":
        parts = [(cells & (why == c), f"{label}: {NONE_WORDS[c]}") for c in np.unique(why[cells])]
    return [
        {
            "type": "heatmap",
            "name": label,
            "legendgroup": s,
            "x": x,
            "y": names,
            "z": np.where(part.T, 1.0, np.nan),
            "showscale": False,
            "colorscale": [[0, colour], [1, colour]],
            "hoverongaps": False,
            "hovertemplate": f"%{{y}}<br>{where}<br>{words}<extra></extra>",
        }
        for part, words in parts or [(cells, label)]
    ]


def _none_codes(events: list, names: list[str], steps: list) -> np.ndarray:
    """NONE_WORDS codes (buckets x rows) of why each row would read None at each bucket's
    first step (`events.none_why`)."""
    out = np.ones((len(steps), len(names)), dtype=np.int64)
    at = np.asarray(steps, dtype=np.int64)
    for r, changes in enumerate(none_why(events, names)):
        for step, code in changes:
            out[at >= step, r] = code
    return out


def nonfinite_marks(x: list, names: list[str], status: np.ndarray, where: str) -> dict:
    """A ✕ on every NaN/Inf cell (a scatter over the heat map), named "NaN / Inf" in the legend."""
    bad = (status == STATUSES.index("nonfinite")).T  # (params, buckets)
    starts = bad & ~np.concatenate([np.zeros((len(bad), 1), bool), bad[:, :-1]], axis=1)
    # where a run of NaN/Inf cells starts, then every `stride`-th column (~60 across the map),
    # so long runs stay readable: marked, not a black band
    stride = max(1, bad.shape[1] // 60)
    bad = starts | (bad & (np.arange(bad.shape[1]) % stride == 0))
    if bad.sum() > MAX_MARKS:
        bad = starts
    rows, cols = np.nonzero(bad)
    label = STYLES["nonfinite"].label
    return {
        "type": "scatter",
        "mode": "markers",
        "name": f"{label} ({NONFINITE_MARK})",
        "x": [x[c] for c in cols.tolist()],
        "y": [names[r] for r in rows.tolist()],
        "marker": {"symbol": "x-thin", "size": 9, "line": {"width": 2, "color": "#000000"}},
        "hovertemplate": f"%{{y}}<br>{where}<br>{label}<extra></extra>",
        "showlegend": True,
    }


def lines_figure(
    overview: Overview,
    params: list[ParamInfo],
    selected: list[str],
    thresholds: Thresholds,
    anomalies: list | None = None,
    frame: dict[str, int] | None = None,
) -> dict:
    """Min/max envelope per bucket of each selected parameter's norm, on a log axis; its step
    axis and margins as the heat map's (`plot_frame`)."""
    index = {p.name: p.id for p in params}
    data = []
    for name in selected[:MAX_LINES]:
        j = index.get(name)
        j = j if j is not None and j < overview.n_params else None  # not recorded yet
        steps, vals = overview.series(j) if j is not None else ([], [])
        ys = [float(v) for v in vals]  # type: ignore[attr-defined]
        shown = plotly_text(elide_middle(name, LEGEND_CHARS))
        off = _off_the_axis(overview, j, ys)
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": shown + off,
                # nothing to draw on a log axis: listed in the legend all the same, saying why
                # (a selected parameter whose norm was exactly 0.0 had simply been left out)
                **({"visible": "legendonly"} if off else {}),
                "x": np.asarray(steps, dtype=np.int32),  # 1-D arrays travel as binary
                "y": np.asarray(ys, dtype=np.float64),
                "text": [format_norm(v) for v in ys],  # Python formats; Plotly only shows it
                # the name goes in the hover's side box, where Plotly never reads it as a template
                "hovertemplate": "step %{x}<br>‖g‖ = %{text}",
            }
        )
    th = thresholds
    layout = {
        "title": {
            "text": "gradient norm over steps (min and max of each bucket)",
            "font": {"size": 13},
        },
        "xaxis": {"title": {"text": "step"}, "range": _step_range(overview)},
        "yaxis": {"type": "log", "title": {"text": "‖g‖ (log)"}, "exponentformat": "power"},
        "height": 380,  # its legend under the plot
        "margin": {**(frame or plot_frame(params)), "t": 40},
        # under the plot: on the right it took the plot's width (and set it apart from the map's)
        "legend": {"orientation": "h", "x": 0, "y": -0.25, "yanchor": "top"},
        "showlegend": True,
    }
    marks = _anomaly_marks(anomalies or [], _axis_span(overview))
    layout["shapes"] = marks["shapes"] + [_hline(v, k) for k, v in th.lines().items()]
    layout["annotations"] = marks["annotations"]
    return {"data": data, "layout": layout}


def _off_the_axis(overview: Overview, j: int | None, ys: list[float]) -> str:
    """What a legend entry adds for parameter j's series when a log axis has nothing of it to
    draw: no bucket with a positive finite norm ("" while it has one, or no step yet)."""
    if j is None or not overview.used or any(v > 0 and math.isfinite(v) for v in ys):
        return ""
    seen = {STATUSES[c] for c in np.unique(overview.status[: overview.used, j])}
    return OFF_AXIS_WORDS.get(frozenset(seen), " (no finite norm)")


#: legend words of a series with nothing on the log axis, by the statuses its buckets had
OFF_AXIS_WORDS = {
    frozenset({"zero"}): " (exactly 0.0: off the log axis)",
    frozenset({"none"}): " (no gradient: None)",
    frozenset({"zero", "none"}): " (0.0 or None: off the log axis)",
}


def default_selection(
    overview: Overview, params: list[ParamInfo], n: int = 4, anomalies: Sequence[Any] = ()
) -> list[str]:
    """The parameters the earliest NaN/Inf anomaly blames (those holding NaN/Inf first), then
    those with the most alarming buckets, then the first ones; rows that were None in every
    bucket (frozen all along, say: their anomalies say when it is not intended) last. Once a
    NaN spreads, every row is NaN alike: the first four by order named none of its sources.

    Example:
        >>> from gradviz_widgets.watch.anomalies import Anomaly
        >>> ps = [ParamInfo(i, f"p{i}", "", (1,), 1, 0) for i in range(6)]
        >>> bad = Anomaly(9, "nonfinite", ["p1", "p5"], held=["p5"])
        >>> default_selection(Overview(), ps, anomalies=[bad])
        ['p5', 'p1', 'p0', 'p2']
    """
    from .history import SEVERITY_RANK

    blamed = _blamed(anomalies, {p.name for p in params})
    if not overview.used or not params:
        rest = [p.name for p in params if p.name not in blamed]
        return (blamed + rest)[:n]
    status = overview.status[: overview.used]
    worst = np.where(
        (status == STATUSES.index("none")).all(axis=0), -2, SEVERITY_RANK[status].max(axis=0)
    )
    order = sorted(range(len(worst)), key=lambda i: (-int(worst[i]), i))
    ranked = [params[i].name for i in order if i < len(params)]
    return (blamed + [name for name in ranked if name not in blamed])[:n]


def _blamed(anomalies: Sequence[Any], known: set[str]) -> list[str]:
    """The earliest NaN/Inf anomaly's parameters: those holding NaN/Inf first, then the rest."""
    first = min((a for a in anomalies if a.kind == "nonfinite"), key=lambda a: a.step, default=None)
    if first is None:
        return []
    names = [*first.held, *first.params]
    return [m for k, m in enumerate(names) if m in known and m not in names[:k]]


#: the colour of spike marks (step axis, outlines of the leading rows; the page's too)
SPIKE_COLOR = "#d62728"
#: colour and label of the anomaly kinds that are no status (the live view and the page alike)
WATCH_KIND_LOOKS = {
    SPIKE: (SPIKE_COLOR, "spike"),
    NONFINITE_LOSS: (STYLES["nonfinite"].line, "NaN/Inf loss"),
}


#: anomalies less than this share of the step axis after a label's first one share its label
#: (their own labels, ~12 px wide each, overlapped: an axis 380 px wide gives 19 px a share)
LABEL_GAP = 1 / 20
#: the most anomaly lines drawn (each label still counts and lists every anomaly it stands for)
MAX_ANOMALY_LINES = 200
#: anomalies a merged label's hover spells out; the rest are counted
HOVER_ANOMALIES = 12


def _axis_span(overview: Overview) -> float:
    """How many steps the figures' step axis spans (buckets of `width` steps)."""
    x = overview.bucket_steps()
    return float(x[-1] - x[0] + overview.width) if len(x) else 1.0


def anomaly_groups(anomalies: Sequence[Any], span: float) -> list[list]:
    """Anomalies in step order, cut into groups of those less than `span` x LABEL_GAP steps
    after the group's first one: one label each, so labels stand at least that far apart.

    Example:
        >>> from gradviz_widgets.watch.anomalies import Anomaly
        >>> ks = [Anomaly(s, "zero", ["w"]) for s in (40, 42, 44, 200)]
        >>> [[a.step for a in g] for g in anomaly_groups(ks, 300)]
        [[40, 42, 44], [200]]
    """
    gap = span * LABEL_GAP
    groups: list[list] = []
    for a in sorted(anomalies, key=lambda a: a.step):
        if groups and a.step - groups[-1][0].step < gap:
            groups[-1].append(a)
        else:
            groups.append([a])
    return groups


def _severity(kind: str) -> int:
    """A status's severity (vocabulary order); other kinds (spikes, ranks) rank above them."""
    from .history import SEVERITY_RANK

    return int(SEVERITY_RANK[STATUSES.index(kind)]) if kind in STATUSES else len(STATUSES)


def _colour(kind: str) -> str:
    look = WATCH_KIND_LOOKS.get(kind)
    return look[0] if look is not None else style(kind).line


def _anomaly_marks(anomalies: list, span: float = 1.0) -> dict:
    """A dotted line at each anomaly's step and one label per group of nearby ones: its kind,
    or "3 anomalies, steps 40-44" (hover: each one's step, kind, parameters and detail)."""
    shapes = [
        {
            "type": "line",
            "xref": "x",
            "yref": "paper",
            "x0": a.step,
            "x1": a.step,
            "y0": 0,
            "y1": 1,
            "line": {"color": _colour(a.kind), "dash": "dot", "width": 1},
        }
        for a in anomalies[:MAX_ANOMALY_LINES]
    ]
    notes = [_group_label(g) for g in anomaly_groups(anomalies, span)]
    return {"shapes": shapes, "annotations": notes}


def _group_label(group: list) -> dict:
    """The label of a group of anomalies (see `_anomaly_marks`)."""
    kind = max(group, key=lambda a: _severity(a.kind)).kind  # the worst one colours the label
    first, last = group[0].step, group[-1].step
    steps = f"step {first}" if first == last else f"steps {first}-{last}"
    text = plotly_text(kind) if len(group) == 1 else f"{len(group)} anomalies, {steps}"
    hover = [anomaly_text(a) for a in group[:HOVER_ANOMALIES]]
    if len(group) > HOVER_ANOMALIES:
        hover.append(f"and {len(group) - HOVER_ANOMALIES} more (watch.anomalies lists them)")
    return {
        "xref": "x",
        "yref": "paper",
        "x": first,
        "y": 1.0,
        "showarrow": False,
        "text": text,
        "hovertext": "<br>".join(hover),
        # inside the plot, along its line: above it the label ran into the title
        "textangle": -90,
        "yanchor": "top",
        "xanchor": "left",
        "font": {"size": 9, "color": _colour(kind)},
    }


def anomaly_text(a: Any) -> str:
    """What hovering an anomaly's mark says: step, kind, parameters and detail (which
    parameters held NaN/Inf, a skipped step, ranks).

    Example:
        >>> from gradviz_widgets.watch.anomalies import Anomaly
        >>> anomaly_text(Anomaly(3, "nonfinite", ["a.weight", "b.bias"], detail="b.bias holds NaN/Inf"))
        'step 3: nonfinite in a.weight, b.bias<br>b.bias holds NaN/Inf'
    """
    names = list(getattr(a, "params", []))
    shown = named_few(names, 5)
    detail = str(getattr(a, "detail", "") or "")
    return plotly_text(f"step {a.step}: {a.kind} in {shown}") + (
        "<br>" + plotly_text(detail) if detail else ""
    )


def _hline(y: float, status: str) -> dict:
    return {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"color": STYLES[status].line, "dash": "dash", "width": 1},
    }


def json_safe(trace: dict) -> dict:
    """NaN is not JSON: arrays with gaps go to the browser with None in them (1-D arrays
    without gaps stay arrays: Plotly's widget sends those as binary buffers)."""
    out = dict(trace)
    for key, value in trace.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            if value.ndim == 1 and np.isfinite(value).all():
                continue
            obj = value.astype(object)
            obj[~np.isfinite(value)] = None
            out[key] = obj.tolist()
    return out
