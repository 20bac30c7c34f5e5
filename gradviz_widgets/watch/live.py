"""Keeping a Plotly FigureWidget in step with a figure dict, cheaply, while a run trains.

A redraw used to replace every trace and the whole layout: Plotly validated and compared every
array element, rebuilt the layout's template and sent the whole figure, ~70-130 ms of the
kernel's GIL per redraw for an 8-parameter model (half the loop's time at 4 redraws a second).
`FigureSync` keeps what it last sent (plain values, compared here with numpy), splits each heat
map into blocks of `BLOCK` step columns and sends, in one Plotly update, only the traces and
layout keys that changed: while a run grows, the newest block and a few scalars. `Throttle`
spaces redraws so the view takes at most `SHARE` of the kernel's time.
"""

from __future__ import annotations

import functools
import threading
import time
from copy import deepcopy
from pathlib import Path
from typing import Any

import numpy as np

from .figures import json_safe

#: step columns per heat-map trace: a redraw resends only the blocks whose cells changed
BLOCK = 32
#: the most of the kernel's time the live view may take (redraw CPU / time between redraws)
SHARE = 0.02


class Throttle:
    """At most one redraw every `min_s` seconds, and never more than `share` of the time: a
    redraw that took c seconds of CPU waits at least c / share before the next one."""

    def __init__(self, min_s: float, share: float = SHARE) -> None:
        self.min_s, self.share = min_s, share
        self.next_at = 0.0
        self.cost_s = 0.0
        #: CPU seconds of all live (not asked-for) redraws so far
        self.spent_s = 0.0

    def due(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) >= self.next_at

    def done(self, started: float, cpu_s: float, forced: bool = False) -> None:
        """A redraw began at `started` and took `cpu_s`; one the user asked for (`forced`: a
        pick, the first draw) does not hold the live redraws back."""
        if forced:
            self.next_at = started + self.min_s
            return
        self.cost_s = cpu_s
        self.spent_s += cpu_s
        self.next_at = started + max(self.min_s, cpu_s / self.share)


def live_figure(lock: threading.RLock) -> Any:
    """A Plotly FigureWidget whose full state (what a newly attached front end gets: a reloaded
    page) is the figure as it is now; `lock` is held while a redraw changes it."""
    fig = _live_figure_class()()
    fig._live_lock = lock
    # Plotly's resize handler (`gd._responsiveChartHandler`), which the sizer calls once the view
    # is in the page (drawn before, a figure is 700 px wide, whatever the cell's width)
    fig._config = {**fig._config, "responsive": True}
    return fig


def live_sizer() -> Any | None:
    """An invisible widget that fits the view's Plotly figures to its box once the box is in
    the page, and whenever its width changes (js/watch_live.js); None without its bundle
    (a source checkout never built: the figures then keep Plotly's first width)."""
    from ..frontend import static_path

    path = static_path("watch_live.js")
    return None if path is None else _sizer_class(path)()


@functools.cache
def _sizer_class(path: Path) -> type:
    import anywidget

    class LiveSizer(anywidget.AnyWidget):  # type: ignore[misc]
        """Fits the live view's figures to their box (no state: the script does it all)."""

        _esm = path

    return LiveSizer


@functools.cache
def _live_figure_class() -> type:
    import plotly.graph_objects as go

    class LiveFigure(go.FigureWidget):  # type: ignore[misc]
        """Plotly sets `_widget_data`/`_widget_layout` (the synced state) only when a figure is
        displayed by itself and sends every later change as a message the page applies once:
        a page reloaded while the kernel runs got the state of the display, an empty figure."""

        def current_state(self) -> tuple[list, dict]:
            """Copies of the traces and layout as they are now (the synced state's values)."""
            return deepcopy(self._data), deepcopy(self._layout_obj._props)

        def get_state(self, key: Any = None, drop_defaults: bool = False) -> dict:
            lock = getattr(self, "_live_lock", None)
            if key is not None or lock is None:  # an update's keys, or still being built
                return super().get_state(key, drop_defaults)
            with lock:  # the whole state: fresh copies, not a sync (no message to the others)
                data, layout = self.current_state()
                self._trait_values["_widget_data"] = data
                self._trait_values["_widget_layout"] = layout
                return super().get_state(key, drop_defaults)

    return LiveFigure


class FigureSync:
    """Owns one FigureWidget's content: `sync(figure)` sends only what differs from last time."""

    def __init__(self, widget: Any) -> None:
        self.widget = widget
        self._traces: list[dict] = []
        self._layout: dict = {}
        #: syncs that sent something (one Plotly update, and an addTraces for new blocks)
        self.updates = 0
        #: what the last sync sent: indices of updated traces, traces added, layout keys
        self.last_sent: tuple[list[int], int, list[str]] = ([], 0, [])

    def sync(self, figure: dict, dx: float | None = None) -> int:
        """Show `figure` (plain dict); heat maps split into column blocks `dx` steps apart.
        Returns how many trace properties and layout keys were sent (0: nothing sent)."""
        traces = layered(figure["data"], dx)
        layout = figure["layout"]
        fig, old = self.widget, self._traces
        kept = len(old)
        if [_shape(t) for t in traces[:kept]] != [_shape(t) for t in old] or kept > len(traces):
            kept = 0  # a different figure: every trace is replaced
        changed = [
            (i, {k: v for k, v in new.items() if not _same(v, was.get(k))})
            for i, (new, was) in enumerate(zip(traces[:kept], old[:kept]))
        ]
        changed = [(i, c) for i, c in changed if c]
        added = traces[kept:]
        keys = {k: v for k, v in layout.items() if not _same(v, self._layout.get(k))}
        if not changed and not added and not keys and kept == len(old):
            return 0
        with fig.batch_update():
            if kept < len(old) or not kept:
                fig.data = []
            for i, props in changed:
                fig.data[i].update(json_safe(props))
            if added:  # new step columns: new blocks, appended (drawn under every scatter)
                fig.add_traces([json_safe(t) for t in added])
            if keys:
                fig.update_layout(keys, overwrite=True)
        self._traces, self._layout = traces, dict(layout)
        self.updates += 1
        self.last_sent = ([i for i, _ in changed], len(added), list(keys))
        return sum(len(c) for _, c in changed) + len(added) + len(keys)


def layered(data: list[dict], dx: float | None) -> list[dict]:
    """Traces in the order the widget holds them: the heat maps' first blocks, the other
    traces (markers: Plotly draws scatters over heat maps whatever the order), then the other
    blocks one after another, so the blocks of new step columns come last and are appended."""
    blocks = [_blocks(t, dx) for t in data if _is_heat(t)]
    flat = [p[0] for p in blocks] + [t for t in data if not _is_heat(t)]
    for b in range(1, max((len(p) for p in blocks), default=0)):
        flat += [p[b] for p in blocks if b < len(p)]
    return flat


def _is_heat(trace: dict) -> bool:
    z = trace.get("z")
    return trace.get("type") == "heatmap" and isinstance(z, np.ndarray) and z.ndim == 2


def _shape(trace: dict) -> tuple:
    """What decides whether a trace can be updated in place (else all are replaced)."""
    return trace.get("type"), trace.get("name"), tuple(sorted(trace))


def _blocks(trace: dict, dx: float | None) -> list[dict]:
    """A heat map of many columns as heat maps of `BLOCK` columns each (x0 + i * dx), each
    after the first starting one column early: drawn over its neighbour's last column (the same
    colours), it hides the light seam Plotly left where two blocks met (every 32 steps)."""
    z = trace["z"]
    x = list(trace.get("x", []))
    step = dx if dx else (x[1] - x[0] if len(x) > 1 else 1)
    out = []
    for b in range(0, max(z.shape[1], 1), BLOCK):
        first = b - 1 if b else 0
        part = {k: v for k, v in trace.items() if k != "x"}
        part["z"] = np.round(z[:, first : b + BLOCK], 3)  # colour; hover shows 2 decimals
        part["x0"], part["dx"] = (x[first] if first < len(x) else 0), step
        if b:  # one colour bar, one legend entry per heat map
            part.pop("colorbar", None)
            part["showscale"] = False
            part["showlegend"] = False
        out.append(part)
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return False
        try:  # plain numbers and texts: one C comparison
            if a == b:
                return True
        except ValueError:  # arrays inside
            pass
        return all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b
