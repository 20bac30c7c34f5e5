"""The explorer widget's chart and selection, as a mixin of ExplorerWidget: the normal figure or
compare mode's grouped one, bar clicks, and the one owner of the selection (Python: the page
only sends clicks and shows the `selected` trait as a class)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import ids
from ..render.chart import figure_dict
from ..render.chart_compare import compare_figure
from .controller import node_showing, node_showing_module

CHART_WIDTH = 440  # px; with the graph's min width, side by side from ~800 px of output


class ChartView:
    """Chart updates, bar clicks and selection.

    Needs from the widget: explorer, chart, pane, controls, guard, view, baseline,
    _set_status(), _fail(), _update_readout().
    """

    explorer: Any
    chart: Any
    pane: Any
    controls: Any
    guard: Any
    view: Any
    baseline: tuple[Any, Any] | None
    selected_module: str | None
    _selected: str | None
    _clickable: Any
    _set_status: Callable[[str, str], None]
    _fail: Callable[..., None]
    _update_readout: Callable[[], None]
    first_view: Any  # the arrangement of the cell: the chart's width

    @property
    def selected(self) -> str | None:
        """The selected node id (Python owns it; the page shows it as a class)."""
        return self._selected

    @selected.setter
    def selected(self, node_id: str | None) -> None:
        self._selected = node_id
        self.pane.selected = node_id or ""

    def select_param(self, name: str) -> str | None:
        """Select the graph node showing parameter `name` (its own node or its folded module)."""
        try:
            record = self.explorer.report.param(name)
        except KeyError as e:
            self._fail(str(e))
            return None
        node_id = node_showing(self.view, ids.param_id(name))
        self._reveal(node_id, record.module)
        if node_id is None:
            self._set_status(f"{name} has no node in the graph: {record.none_reason}", "warning")
        self._update_chart()
        self._update_readout()
        return node_id

    def _figure(self) -> dict:
        mode = self.controls.mode_box.value
        if self.baseline is not None:
            return compare_figure(self.baseline[0], self.explorer.report, mode)
        fig = figure_dict(self.explorer.report, mode, self.selected_module)
        layout = self.chart.layout
        if any(a in layout and layout[a].overlaying for a in ("xaxis2", "yaxis2")):
            # back from compare mode (its ratio axis is x2 on flat charts, y2 on upright ones):
            # hide its ratio axes, the default legend again
            hidden = {"visible": False, "overlaying": None}
            fig["layout"].update(xaxis2=hidden, yaxis2=hidden, legend={}, bargroupgap=None)
        return fig

    def _update_chart(self) -> None:
        fig = self._figure()
        with self.chart.batch_update():
            if [t.type for t in self.chart.data] != [t["type"] for t in fig["data"]]:
                self.chart.data = ()
                for trace in fig["data"]:
                    self.chart.add_trace(trace)
            else:
                for trace, new in zip(self.chart.data, fig["data"]):
                    trace.update(new, overwrite=True)
            self.chart.layout.update(fig["layout"], overwrite=True)
            self.chart.layout.update(width=self.first_view.chart_width, autosize=False)
        if self.chart.data and self.chart.data[0] is not self._clickable:
            self._clickable = self.chart.data[0]
            self._clickable.on_click(self.guard.wrap(self._bar_clicked))

    def _bar_clicked(self, trace: Any, points: Any, state: Any) -> None:
        if not points.point_inds:
            return
        row = trace.customdata[points.point_inds[0]]
        if self.controls.mode_box.value == "param":
            self.select_param(row[0])
        else:
            self._reveal(node_showing_module(self.view, row[1]), row[1])
            self._update_chart()

    def _reveal(self, node_id: str | None, module: str) -> None:
        """Select `module` for the chart and readout; highlight and centre its node if drawn."""
        self.selected_module = module
        with self.pane.hold_sync():
            self.pane.highlight = [node_id] if node_id else []
            self._selected = node_id
            if node_id:
                self.pane.selected = node_id
