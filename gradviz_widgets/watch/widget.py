"""The GradWatch view: a heat map of parameters x steps and a line chart of chosen parameters.

Figures are built as plain dicts by pure functions (testable without a browser); WatchWidget
puts them in Plotly FigureWidgets and, while a run records, refreshes them from the writer
thread after a flush, at most every `refresh_s` seconds. Colours follow the explorer's status
vocabulary (render.STATUS_STYLE): blue = vanishing, green = healthy, orange = exploding,
vermillion = NaN/Inf, black = exactly 0.0, grey = None.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import numpy as np

from ..render import STATUS_STYLE
from ..stats import STATUSES, Thresholds
from .history import Overview
from .store import ParamInfo

SPECIAL = ("none", "zero", "nonfinite")
MAX_LINES = 6


def colorscale(zmin: float, zmax: float, thresholds: Thresholds) -> list[list]:
    """A log-norm colour scale whose bands change colour at the vanishing and exploding lines.

    Example:
        >>> colorscale(-10, 6, Thresholds())[0]
        [0.0, '#0072b2']
    """
    span = max(zmax - zmin, 1e-9)

    def at(v: float) -> float:
        return min(max((v - zmin) / span, 0.0), 1.0)

    van, exp = at(math.log10(thresholds.vanishing)), at(math.log10(thresholds.exploding))
    v_fill, v_line = STATUS_STYLE["vanishing"][:2]
    h_fill, h_line = STATUS_STYLE["healthy"][:2]
    e_fill, e_line = STATUS_STYLE["exploding"][:2]
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
    lo = math.log10(thresholds.vanishing) - 1
    hi = math.log10(thresholds.exploding) + 1
    if finite.size:
        lo, hi = min(lo, math.log10(finite.min())), max(hi, math.log10(finite.max()))
    return math.floor(lo), math.ceil(hi)


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
) -> dict:
    """Parameters (rows, grouped by module) x buckets of steps; colour = log10 of the bucket's
    largest norm (smallest where it dipped below the vanishing line). None, 0.0 and NaN/Inf
    cells get their own colours on top; anomalies are marked on the step axis."""
    order = module_order(params)[: overview.n_params]
    x = overview.bucket_steps().tolist()
    values = overview.cell_values()[:, order] if overview.used else np.zeros((0, len(order)))
    status = overview.status[: overview.used, order]
    zmin, zmax = z_range(values, thresholds)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(np.isfinite(values) & (values > 0), np.log10(values), np.nan).T
    names = [params[i].name for i in order]
    data = [
        {
            "type": "heatmap",
            "name": "log10 ‖g‖",
            "x": x,
            "y": names,
            "z": z,
            "zmin": zmin,
            "zmax": zmax,
            "colorscale": colorscale(zmin, zmax, thresholds),
            "colorbar": {"title": {"text": "log10 ‖g‖"}, "len": 0.8},
            "hoverongaps": False,
            "hovertemplate": "%{y}<br>steps from %{x}<br>log10 ‖g‖ = %{z:.2f}<extra></extra>",
        }
    ]
    for s in SPECIAL:
        mask = (status == STATUSES.index(s)).T
        colour = STATUS_STYLE[s][1]
        data.append(
            {
                "type": "heatmap",
                "name": STATUS_STYLE[s][3],
                "x": x,
                "y": names,
                "z": np.where(mask, 1.0, np.nan),
                "showscale": False,
                "colorscale": [[0, colour], [1, colour]],
                "hoverongaps": False,
                "hovertemplate": f"%{{y}}<br>steps from %{{x}}<br>{STATUS_STYLE[s][3]}"
                "<extra></extra>",
            }
        )
    layout = {
        "title": {
            "text": f"gradient norms per parameter ({overview.width} step(s) per "
            "column: spikes and dips kept)",
            "font": {"size": 13},
        },
        "xaxis": {"title": {"text": "step"}},
        "yaxis": {"autorange": "reversed", "automargin": True},
        "height": max(300, 16 * len(names) + 120),
        "margin": {"l": 10, "r": 10, "t": 40},
        **_anomaly_marks(anomalies or []),
    }
    return {"data": data, "layout": layout}


def lines_figure(
    overview: Overview,
    params: list[ParamInfo],
    selected: list[str],
    thresholds: Thresholds,
    anomalies: list | None = None,
) -> dict:
    """Min/max envelope per bucket of each selected parameter's norm, on a log axis."""
    index = {p.name: p.id for p in params}
    data = []
    for name in selected[:MAX_LINES]:
        j = index.get(name)
        steps, vals = overview.series(j) if j is not None and j < overview.n_params else ([], [])
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": name,
                "x": [int(s) for s in steps],  # type: ignore[attr-defined]
                "y": [float(v) for v in vals],  # type: ignore[attr-defined]
                "hovertemplate": f"{name}<br>step %{{x}}<br>‖g‖ = %{{y:.3g}}<extra></extra>",
            }
        )
    th = thresholds
    layout = {
        "title": {
            "text": "gradient norm over steps (min and max of each bucket)",
            "font": {"size": 13},
        },
        "xaxis": {"title": {"text": "step"}},
        "yaxis": {"type": "log", "title": {"text": "‖g‖ (log)"}, "exponentformat": "power"},
        "height": 320,
        "margin": {"l": 60, "r": 10, "t": 40},
        "showlegend": True,
    }
    marks = _anomaly_marks(anomalies or [])
    layout["shapes"] = marks["shapes"] + [
        _hline(th.vanishing, "vanishing"),
        _hline(th.exploding, "exploding"),
    ]
    layout["annotations"] = marks["annotations"]
    return {"data": data, "layout": layout}


def default_selection(overview: Overview, params: list[ParamInfo], n: int = 4) -> list[str]:
    """The parameters with the most alarming buckets, then the first ones."""
    from .history import _RANK

    if not overview.used or not params:
        return [p.name for p in params[:n]]
    worst = _RANK[overview.status[: overview.used]].max(axis=0)
    order = sorted(range(len(worst)), key=lambda i: (-int(worst[i]), i))
    return [params[i].name for i in order[:n] if i < len(params)]


def _anomaly_marks(anomalies: list, limit: int = 40) -> dict:
    shapes, notes = [], []
    for a in anomalies[:limit]:
        colour = STATUS_STYLE.get(a.kind, STATUS_STYLE["none"])[1]
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": a.step,
                "x1": a.step,
                "y0": 0,
                "y1": 1,
                "line": {"color": colour, "dash": "dot", "width": 1},
            }
        )
        notes.append(
            {
                "xref": "x",
                "yref": "paper",
                "x": a.step,
                "y": 1.0,
                "showarrow": False,
                "text": a.kind,
                "textangle": -60,
                "yanchor": "bottom",
                "font": {"size": 9, "color": colour},
            }
        )
    return {"shapes": shapes, "annotations": notes}


def _hline(y: float, status: str) -> dict:
    return {
        "type": "line",
        "xref": "paper",
        "x0": 0,
        "x1": 1,
        "y0": y,
        "y1": y,
        "line": {"color": STATUS_STYLE[status][1], "dash": "dash", "width": 1},
    }


def _json_safe(trace: dict) -> dict:
    """NaN is not JSON: arrays go to the browser with None in the gaps."""
    out = dict(trace)
    for key, value in trace.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            obj = value.astype(object)
            obj[~np.isfinite(value)] = None
            out[key] = obj.tolist()
    return out


class WatchWidget:
    """Heat map + line chart; follows a recording GradWatch, or shows a RecordedRun."""

    def __init__(
        self, source: Any, selected: list[str] | None = None, refresh_s: float = 0.25
    ) -> None:
        import ipywidgets as w
        import pandas  # noqa: F401  plotly imports it lazily: never first from the writer thread
        import plotly.graph_objects as go

        self.source = source
        self.refresh_s = max(refresh_s, 0.25)  # at most ~4 updates a second
        self.updates = 0
        self._dirty = False
        self._last = 0.0
        self._lock = threading.Lock()
        self._overview = source.overview()
        params = self._params()
        self.selected = selected or default_selection(self._overview, params)
        # until the user picks, the lines follow the most alarming parameters (a view opened
        # before the first flush has no parameters yet to choose from)
        self._picked = bool(selected)
        self.heatmap = go.FigureWidget()
        self.lines = go.FigureWidget()
        self.picker = w.SelectMultiple(
            options=[p.name for p in params],
            value=tuple(s for s in self.selected if s in {p.name for p in params}),
            rows=6,
            description="lines",
        )
        self.picker.observe(self._on_pick, names="value")
        self.status = w.HTML()
        self.box = w.VBox([self.status, self.heatmap, w.HBox([self.picker]), self.lines])
        self.refresh(force=True)
        writer = getattr(source, "_writer", None)
        if writer is not None and not source.closed:
            writer.listeners.append(self._on_flush)

    def _params(self) -> list[ParamInfo]:
        writer = getattr(self.source, "_writer", None)
        return list(writer.params) if writer is not None else self.source.params

    def _anomalies(self) -> list:
        writer = getattr(self.source, "_writer", None)
        if writer is None:
            return self.source.anomalies
        from .anomalies import Anomaly

        return [Anomaly(s, k, p) for s, k, p in writer.snapshot()[1]]

    def _on_pick(self, change: dict) -> None:
        self.selected = list(change["new"])
        self._picked = True
        self.refresh(force=True)

    def _on_flush(self, writer: Any, chunk: Any) -> None:
        if chunk is not None or self._dirty:
            self._dirty = not self.refresh()

    def figures(self) -> tuple[dict, dict]:
        """The two figure dicts as they are now (what the widget shows)."""
        writer = getattr(self.source, "_writer", None)
        lock = writer._lock if writer is not None else self._lock
        params, anomalies = self._params(), self._anomalies()
        with lock:
            th = self.source.thresholds
            if not self._picked:
                self.selected = default_selection(self._overview, params)
            return (
                heatmap_figure(self._overview, params, th, anomalies),
                lines_figure(self._overview, params, self.selected, th, anomalies),
            )

    def refresh(self, force: bool = False) -> bool:
        """Redraw from the newest numbers (skipped if the last redraw was < refresh_s ago)."""
        now = time.monotonic()
        if not force and now - self._last < self.refresh_s:
            return False
        self._last = now
        heat, lines = self.figures()
        for fig, new in ((self.heatmap, heat), (self.lines, lines)):
            with fig.batch_update():
                traces = [_json_safe(d) for d in new["data"]]
                if len(fig.data) != len(traces):
                    fig.data = []
                    fig.add_traces(traces)
                else:
                    for trace, d in zip(fig.data, traces):
                        trace.update(d)
                fig.layout = new["layout"]
        writer = getattr(self.source, "_writer", None)
        steps = (
            writer.last_step
            if writer is not None
            else (int(self._overview.bucket_steps()[-1]) if self._overview.used else -1)
        )
        self.status.value = (
            f"<b>GradWatch</b> {self.source.path}: up to step {steps}, "
            f"{len(self._params())} parameters, "
            f"{len(self._anomalies())} anomalies"
        )
        self.updates += 1
        return True

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.box)
