"""The GradWatch view: a heat map of parameters x steps and a line chart of chosen parameters.

Figures are built as plain dicts by pure functions (testable without a browser); WatchWidget
puts them in Plotly FigureWidgets and, while a run records, refreshes them from the writer
thread after a flush, at most every `refresh_s` seconds. Colours follow the explorer's status
vocabulary (vocabulary.STYLES): blue = vanishing, green = healthy, orange = exploding,
vermillion = NaN/Inf, black = exactly 0.0, grey = None.
"""

from __future__ import annotations

import html
import math
import threading
import time
from typing import Any

from .figures import (
    colorscale,
    default_selection,
    heatmap_figure,
    lines_figure,
    module_order,
    plot_frame,
    z_range,
)
from .live import FigureSync, Throttle, live_figure, live_sizer
from .store import ParamInfo

__all__ = [
    "WatchWidget",
    "colorscale",
    "default_selection",
    "heatmap_figure",
    "lines_figure",
    "module_order",
    "z_range",
]


class WatchWidget:
    """Heat map + line chart; follows a recording GradWatch, or shows a RecordedRun (a run of
    several ranks gets a rank menu: the heat map and lines of the rank picked)."""

    def __init__(
        self, source: Any, selected: list[str] | None = None, refresh_s: float = 0.25
    ) -> None:
        import ipywidgets as w
        import pandas  # noqa: F401  plotly imports it lazily: never first from the writer thread

        self.source = source
        self.refresh_s = max(refresh_s, 0.25)  # at most ~4 updates a second
        self.updates = 0
        self._dirty = False
        self.throttle = Throttle(self.refresh_s)
        #: the header of the newest drawing and the step it drew up to
        self._drawn: tuple[str, int] = ("", -1)
        self._lock = threading.Lock()
        # one redraw at a time, from reading the numbers to the header (writer thread, a pick,
        # a display, a new page's state): one that read older numbers never lands after a newer
        self._draw = threading.RLock()
        self._setting_picker: int | None = None
        self._overview = source.overview()
        params = self._params()
        self.selected = selected or default_selection(self._overview, params)
        # until the user picks, the lines follow the most alarming parameters (a view opened
        # before the first flush has no parameters yet to choose from)
        self._picked = bool(selected)
        self.heatmap = live_figure(self._draw)
        self.lines = live_figure(self._draw)
        self._sync = (FigureSync(self.heatmap), FigureSync(self.lines))
        self.picker = w.SelectMultiple(rows=6, description="lines")
        self._sync_picker(params)
        self.picker.observe(self._on_pick, names="value")
        self.status = w.HTML()
        ranks = getattr(source, "ranks", None)
        self.rank_menu = w.Dropdown(
            options=[(f"rank {r}", r) for r in ranks] if isinstance(ranks, list) else [],
            description="rank",
            layout={"display": "" if isinstance(ranks, list) and len(ranks) > 1 else "none"},
        )
        self.rank_menu.observe(self._on_rank, names="value")
        row = w.HBox([self.picker, self.rank_menu], layout={"width": "100%"})
        #: fits the figures to the box once it is in the page (None without its script)
        self.sizer = live_sizer()
        parts = [self.status, self.heatmap, row, self.lines]
        self.box = w.VBox(parts + ([self.sizer] if self.sizer is not None else []))
        self.box.add_class("gvw-watch-live")  # what the sizer looks for (js/watch_live.js)
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

        return [Anomaly.from_row(row) for row in writer.snapshot()[1]]

    def _spikes(self) -> list:
        """Spike events without waiting for the writer (the view redraws on its thread)."""
        writer = getattr(self.source, "_writer", None)
        if writer is None:
            return list(getattr(self.source, "spikes", []))
        return writer.spike_list()

    def _events(self) -> list:
        """Parameter events (frozen, unfrozen, ...) as the writer has them, without waiting."""
        writer = getattr(self.source, "_writer", None)
        if writer is None:
            return list(getattr(self.source, "events", []))
        return list(writer.events)

    def _on_rank(self, change: dict) -> None:
        """Another rank of a run opened from disk: its heat map and lines."""
        self._overview = self.source.overview(rank=change["new"])
        self.refresh(force=True)

    def _on_pick(self, change: dict) -> None:
        if self._setting_picker == threading.get_ident():
            return  # the view itself updating the list, not the user picking
        self.selected = list(change["new"])
        self._picked = True
        self.refresh(force=True)

    def _on_flush(self, writer: Any, chunk: Any) -> None:
        # closing: the last flushes come now, the throttle must not leave the view behind
        closing = bool(getattr(self.source, "closed", False))
        if chunk is not None or self._dirty or closing:
            self._dirty = not self.refresh(force=closing)

    def _sync_picker(self, params: list[ParamInfo]) -> None:
        """The list offers every parameter recorded so far (a view opened before the writer
        had them offered none, ever) and shows the lines drawn."""
        names = tuple(p.name for p in params)
        known = set(names)
        value = tuple(s for s in self.selected if s in known)
        if self.picker.options == names and self.picker.value == value:
            return
        self._setting_picker = threading.get_ident()
        try:
            if self.picker.options != names:
                self.picker.options = names  # resets the value
                self.picker.layout.width = picker_width(names)
            self.picker.value = value
        finally:
            self._setting_picker = None

    def figures(self) -> tuple[dict, dict]:
        """The two figure dicts as they are now (what the widget shows)."""
        writer = getattr(self.source, "_writer", None)
        lock = writer._lock if writer is not None else self._lock
        params, anomalies = self._params(), self._anomalies()
        with lock:
            th = self.source.thresholds
            if not self._picked:
                self.selected = default_selection(self._overview, params, anomalies=anomalies)
            frame = plot_frame(params)  # both plots line up
            return (
                heatmap_figure(
                    self._overview, params, th, anomalies, self._spikes(), self._events(), frame
                ),
                lines_figure(self._overview, params, self.selected, th, anomalies, frame),
            )

    def refresh(self, force: bool = False) -> bool:
        """Redraw from the newest numbers, sending only what changed; skipped while the
        throttle waits (at least `refresh_s` apart, and the view under 2% of the kernel's time)."""
        now = time.monotonic()
        if not force and not self.throttle.due(now):
            self._say_behind(now)
            return False
        cpu = time.thread_time()
        with self._draw:
            heat, lines = self.figures()
            self._sync[0].sync(heat, dx=self._overview.width)
            self._sync[1].sync(lines)
            self._sync_picker(self._params())
            steps = self._last_step()
            self._drawn = (self._header(steps), steps)
            self.status.value = self._drawn[0]
            self.updates += 1
        self.throttle.done(now, time.thread_time() - cpu, forced=force)
        return True

    def _say_behind(self, now: float) -> None:
        """A redraw the throttle holds back: the header says how far the record is ahead of
        the drawing, and when the next redraw comes (a 212-parameter view, 0.27 s a redraw,
        drew every ~14 s and read "up to step 466" at step 1,800, unsaid)."""
        header, drawn = self._drawn
        last = self._last_step()
        if last <= drawn or not header:
            return
        wait = self.throttle.next_at - now
        when = f"; redrawn in ~{math.ceil(wait)} s" if math.isfinite(wait) else ""
        self.status.value = (
            f"{header} · recorded up to step {last}{when} (the view keeps to "
            f"{round(self.throttle.share * 100)}% of the kernel's time)"
        )

    def _last_step(self) -> int:
        writer = getattr(self.source, "_writer", None)
        if writer is not None:
            return int(writer.last_step)
        return int(self._overview.bucket_steps()[-1]) if self._overview.used else -1

    def _header(self, steps: int) -> str:
        rank = f" rank {self.rank_menu.value}" if self.rank_menu.options else ""
        return (
            f"<b>GradWatch</b> {html.escape(str(getattr(self.source, 'name', self.source.path)))}"
            f"{rank}: up to step {steps}, "
            f"{len(self._params())} parameters, "
            f"{len(self._anomalies())} anomalies"
        )

    def close(self) -> None:
        """Stop following the run and take the view off the page (the record goes on)."""
        writer = getattr(self.source, "_writer", None)
        if writer is not None and self._on_flush in writer.listeners:
            writer.listeners.remove(self._on_flush)
        _close_tree(self.box)

    def _ipython_display_(self) -> None:
        from IPython.display import display

        # Plotly puts a FigureWidget's traces into its synced state only when the figure itself
        # is displayed; inside a VBox the page would get the empty state of its creation, and the
        # later updates would name traces it never had (a blank live view in JupyterLab)
        with self._draw:
            for fig in (self.heatmap, self.lines):
                data, layout = fig.current_state()
                fig._widget_layout = layout  # synced traits: sent to the page, layout first
                fig._widget_data = data
        display(self.box)


def _close_tree(widget: Any) -> None:
    """Close `widget`, its children, theirs, and their layout and style widgets (a close of
    the box alone left the lines list, the rank menu and 9 layout / style widgets open)."""
    for child in getattr(widget, "children", ()):
        _close_tree(child)
    for part in (getattr(widget, "layout", None), getattr(widget, "style", None)):
        if part is not None and hasattr(part, "close"):
            part.close()
    widget.close()


#: the picker's label (ipywidgets' --jp-widgets-inline-label-width) and its list's padding,
#: border and scroll bar, in px
PICKER_LABEL_PX, PICKER_CHROME_PX = 80, 40


def picker_width(names: tuple[str, ...] | list[str]) -> str:
    """The lines list's CSS width: as wide as its longest name (ipywidgets' default, ~160 px of
    list, cut GPT-2's `transformer.h.0.attn.c_attn.weight`), never wider than its row.

    Example:
        >>> picker_width(["transformer.h.0.attn.c_attn.weight"])
        'min(100%, calc(120px + 36ch))'
    """
    chars = max((len(n) for n in names), default=0)
    return f"min(100%, calc({PICKER_LABEL_PX + PICKER_CHROME_PX}px + {max(chars, 16) + 2}ch))"
