"""The explorer widget's norms chart, a part of ExplorerWidget: the plotly FigureWidget with the
normal figure or compare mode's grouped one, and bar clicks turned into "select this parameter"
or "select this module" (the widget owns the selection)."""

from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy
from typing import Any

import plotly.graph_objects as go

from ..render.chart import figure_dict
from ..render.chart_compare import compare_figure
from ..report.grad_report import GradReport
from .controller import ActionGuard

CHART_WIDTH = 440  # px; with the graph's min width, side by side from ~800 px of output


class ChartView:
    """Owns the FigureWidget (`figure`), the mode of the figure it shows and the trace that
    answers clicks; a click on a bar calls `on_param(name)` (per-parameter chart) or
    `on_module(module)` (per-module chart), through the guard.

    Example:
        >>> view = ChartView({}, "param", ActionGuard(print), print, print)  # doctest: +SKIP
    """

    def __init__(
        self,
        first: dict,
        mode: str,
        guard: ActionGuard,
        on_param: Callable[[str], Any],
        on_module: Callable[[str], Any],
        width: Callable[[], int] = lambda: CHART_WIDTH,
    ) -> None:
        # the first figure goes into the constructor: plotly's front end applies trace and
        # layout messages only once its module has loaded, so data added before that is lost
        self.figure = go.FigureWidget(first)
        self.figure.layout.update(width=CHART_WIDTH, autosize=False)
        self.mode = mode
        self._guard = guard
        self._on_param = on_param
        self._on_module = on_module
        self._width = width  # the cell's arrangement decides it (widget/first_view.py)
        self._clickable: Any = None
        self._shown: tuple[str, dict, int] | None = None  # what the figure shows now
        self._listen()

    def figure_for(
        self,
        report: GradReport,
        mode: str,
        selected_module: str | None,
        baseline: GradReport | None,
    ) -> dict:
        """The figure (plain data) for `report`: against `baseline` (compare mode) when given,
        else with `selected_module`'s bars outlined."""
        # the labels are chosen for the width the chart gets (names that do not fit a bar:
        # horizontal bars), so an arrangement that changes it makes the figure again
        if baseline is not None:
            return compare_figure(baseline, report, mode, width=self._width())
        fig = figure_dict(report, mode, selected_module, width=self._width())
        layout = self.figure.layout
        if any(a in layout and layout[a].overlaying for a in ("xaxis2", "yaxis2")):
            # back from compare mode (its ratio axis is x2 on flat charts, y2 on upright ones):
            # hide its ratio axes, the default legend again
            hidden = {"visible": False, "overlaying": None}
            fig["layout"].update(xaxis2=hidden, yaxis2=hidden, legend={}, bargroupgap=None)
        return fig

    def show(self, fig: dict, mode: str) -> None:
        """Draw `fig` (made for `mode`), keeping the traces when their types stay the same;
        the same figure again (a hook toggled: the norms do not change) sends nothing, so the
        page does not draw thousands of bars again."""
        shown = (mode, fig, self._width())
        if shown == self._shown:
            return
        chart = self.figure
        if [t.type for t in chart.data] != [t["type"] for t in fig["data"]]:
            # new traces, and the whole layout with them: plotly sends only what differs from
            # its own copy, and a front end that drew an older state (marimo shows the widget
            # from its first figure) kept the old axes (compare's names lay flat, overprinted)
            chart.data = ()
            chart.add_traces(fig["data"])  # one message
            chart.layout = {**fig["layout"], "width": shown[2], "autosize": False}
        else:
            with chart.batch_update():
                for trace, new in zip(chart.data, fig["data"]):
                    trace.update(new, overwrite=True)
                chart.layout.update(fig["layout"], overwrite=True)
                chart.layout.update(width=shown[2], autosize=False)
        self._sync_state()
        self.mode = mode
        self._shown = shown
        self._listen()

    def _sync_state(self) -> None:
        """Make the figure's synced state (what a page draws a new view from) the figure as
        it is now. Plotly sends each change as a message that only a loaded front end applies:
        marimo delivers the messages sent while plotly's 5 MB module still loads to no one,
        and then draws the chart from the state of its display (the cell's width reached
        Python first: the chart stayed 440 px beside a 1,248 px graph). Set after the
        messages: plotly's front end adds the traces of an addTraces to its copy."""
        figure = self.figure
        figure._widget_layout = deepcopy(figure._layout_obj._props)
        figure._widget_data = deepcopy(figure._data)

    def _listen(self) -> None:
        if self.figure.data and self.figure.data[0] is not self._clickable:
            self._clickable = self.figure.data[0]
            self._clickable.on_click(self._guard.wrap(self.bar_clicked))

    def close(self) -> None:
        """Drop the click callbacks (plotly keeps a closed FigureWidget alive, and through them
        it would keep the widget) and close the figure."""
        for trace in self.figure.data:
            trace.on_click(None)
        self._clickable = None
        self.figure.close()

    def bar_clicked(self, trace: Any, points: Any, state: Any) -> None:
        """What plotly calls on a click on `trace` (also the way tests click a bar)."""
        if not points.point_inds:
            return
        row = trace.customdata[points.point_inds[0]]
        if self.mode == "param":
            self._on_param(row[0])
        else:
            self._on_module(row[1])
