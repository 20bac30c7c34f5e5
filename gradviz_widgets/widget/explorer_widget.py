"""ExplorerWidget: the graph pane and the norms chart side by side, a toolbar, a hook readout.

Thin: every number comes from the explorer (pure torch analysis); this file only turns user
actions into explorer calls and explorer results into widget state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ipywidgets as W
import plotly.graph_objects as go

from ..errors import GradExplorerError
from ..graph.ghosts import add_ghosts
from ..graph.grad_graph import GradGraph
from ..graph.groups import unfolded_group_at
from ..graph.search import search_index, targets, unfold_to
from ..hooks.config import HOOK_KINDS
from ..render.chart import figure_dict
from ..render.dot import node_info, render_dot
from ..render.readout import readout_html
from ..vocabulary import plain_text
from .actions import ExportActions, SettingsActions
from .chart import CHART_WIDTH, ChartView
from .compare import CompareActions
from .controller import (
    ActionGuard,
    drawn_count,
    error_text,
    explain_click,
    find_node,
    hooked_ids,
    loss_line_html,
    module_of,
    node_showing,
)
from .controls import ToolbarWiring
from .first_view import FirstView
from .graph_pane import GraphPane
from .session import Session

CHART_MAX_HEIGHT = "560px"  # taller charts (many flat bars) scroll inside their box


class ExplorerWidget(
    SettingsActions, ExportActions, CompareActions, ChartView, ToolbarWiring, W.VBox
):
    """What `GradExplorer.show()` returns.

    Every callback (graph clicks, toolbar changes, bar clicks) runs through one guard: any
    exception shows in the status line, the busy state ends and the last good view stays. A
    change whose re-run fails (a hook toggled, a modifier, the device, the thresholds) is
    undone, so the hooks Python uses and the markers the page shows always agree.

    Example:
        >>> ExplorerWidget(GradExplorer(model, x))     # doctest: +SKIP
    """

    def __init__(
        self,
        explorer: Session,
        *,
        depth: int | str | None = "auto",
        max_nodes: int = 120,
        hook_kind: str = "backward",
        chart_mode: str = "param",
        height: str = "520px",
        export_dir: str | Path = "gradviz_export",
    ) -> None:
        if hook_kind not in HOOK_KINDS:
            raise GradExplorerError(f"hook_kind must be one of {HOOK_KINDS}, got {hook_kind!r}")
        self.explorer = explorer
        self.max_nodes = max_nodes
        self.depth = None if depth == "full" else depth
        self.expand: set[str] = set()
        self.collapse: set[str] = set()
        self._selected: str | None = None
        self.selected_module: str | None = None
        self.export_dir = Path(export_dir)  # default folder of export_svg/csv/json (Python API)
        self.view: GradGraph | None = None
        self.last_error: str | None = None
        self.last_exception: BaseException | None = None
        self.runs = 0
        self.baseline: tuple[Any, GradGraph | None] | None = None  # compare mode's run A
        self.recent: list[tuple[Any, GradGraph]] = []  # runs shown, newest last
        self.guard = ActionGuard(self._failed, self._queued)
        self._quiet = False  # set while Python writes a control's value (no observer action)

        self.pane = GraphPane(height=height)
        self.readout = W.HTML(readout_html([], None, {}))
        self.notes = W.HTML(layout=W.Layout(display="none"))  # compare summary, ranks
        first_error = self._first_run()
        # the first figure goes into the constructor: plotly's front end applies trace and
        # layout messages only once its module has loaded, so data added before that is lost
        first = figure_dict(explorer.report, chart_mode) if first_error is None else {}
        self.chart = go.FigureWidget(first)
        self.chart.layout.update(width=CHART_WIDTH, autosize=False)
        self.pane.layout.width = "100%"  # the pane fills its box (a flex row would shrink it)
        self._clickable: Any = None
        self._build_toolbar(hook_kind, chart_mode)
        body = self._wire_pane()
        super().__init__([self.toolbar, self.notes, body, self.readout])
        self.add_class("gv-explorer")
        self.toolbar.add_class("gv-toolbar")
        if first_error is None:
            self.guard.call(self.refresh)
        else:
            self._fail(first_error)

    def _wire_pane(self) -> W.HBox:
        """The pane's callbacks, each through the guard; the body and its `FirstView`."""
        g = self.guard.wrap
        self.pane.on_node_click(g(self.click_node))
        self.pane.on_toggle_scope(g(self.toggle_scope))
        self.pane.on_layout_error(g(self._layout_failed))
        self.pane.on_reveal(g(self.reveal_name))
        body = self._body()
        self.first_view = FirstView(
            (body, *body.children),  # type: ignore[arg-type]
            self.refresh,
            self._update_chart,
            lambda: self.depth == "auto" and not (self.expand or self.collapse),
            lambda: self.pane.revision,
        )
        self.pane.on_fit(g(lambda r: self.first_view.fitted(r, len(self.pane.nodes))))
        self.pane.on_resize(g(self.first_view.resized))
        return body

    def _body(self) -> W.HBox:
        """The graph and the chart side by side. The chart has a fixed width (plotly cannot
        size itself from a flex box that has no width yet at first draw) and scrolls vertically
        when it has many rows; the graph takes the rest; narrow outputs stack them (flex wrap),
        so nothing scrolls sideways."""
        chart_box = W.Box(
            [self.chart],
            layout=W.Layout(
                flex="0 1 auto",
                max_width="100%",
                max_height=CHART_MAX_HEIGHT,
                overflow="hidden auto",
            ),
        )
        chart_box.add_class("gv-chart-box")
        graph_box = W.Box(
            [self.pane], layout=W.Layout(flex="1 1 340px", min_width="300px", max_width="100%")
        )
        return W.HBox([graph_box, chart_box], layout=W.Layout(width="100%", flex_flow="row wrap"))

    def _first_run(self) -> str | None:
        """Use the explorer's newest run if still current, or run once; the error text if that
        fails."""
        if not self.explorer.stale:
            self.runs = 1
            return None
        try:
            self.explorer.run()
        except Exception as e:  # noqa: BLE001 - shown in the status line
            self.last_exception = e
            return error_text(e)
        self.runs = 1
        return None

    # ---- toolbar -----------------------------------------------------------------------------
    def _device_in_force(self) -> str:
        return self.explorer.device or str(self.explorer.model_device)

    # ---- actions (also callable from Python and tests) -------------------------------------
    def rerun(self) -> bool:
        """Forward + backward again; on failure the error shows and the last good view stays."""
        return self._apply(None, "")

    def click_node(self, node_id: str) -> None:
        """Toggle the chosen kind of hook on the clicked node's module (or node), re-run."""
        with self.pane.hold_sync():  # Python owns the selection: the page only sent a click
            self.selected = node_id
            self.pane.highlight = []  # a new selection ends the bar-click dimming
        node = find_node(node_id, self.view, self.explorer.graph)
        kind = self.controls.kind_box.value
        if node is None:
            self._fail(f"node {node_id!r} is not in the current graph; re-run to refresh")
            return
        explained = explain_click(node)
        if explained:  # a ghost or a ×N group: nothing to hook
            self.selected_module = node.module if node.kind == "ghost" else self.selected_module
            self._set_status(*explained)
            return
        target = node_id if kind == "tensor" else module_of(node)
        if kind == "tensor" and node.kind != "op":
            self._fail(
                f"tensor hooks go on op nodes; {node_id} is a {node.kind} node. "
                "Pick a module hook kind to hook its module."
            )
            return
        if target is None:
            self._fail(
                f"{node_id} is not inside a module of the model (the loss or an input); "
                "click a node of the model to hook its module"
            )
            return
        self.selected_module = target if kind != "tensor" else node.module
        state: dict[str, bool] = {}

        def toggle() -> None:
            state["on"] = self.explorer.toggle_hook(target, kind)

        where = target or "(root)"
        if self._apply(toggle, f"{kind} hook at {where}"):
            verb = "on" if state["on"] else "off"
            self._set_status(
                f"{kind} hook {verb} at {where}; " + self.explorer.report.summary(), "info"
            )
        else:
            self._update_readout()

    def toggle_scope(self, module: str) -> None:
        """Fold or unfold one module (a module path, as the page sends it) without a re-run."""
        group = unfolded_group_at(module, self.expand, self.explorer.graph.modules)
        if group is not None:  # the frame around unfolded ×N blocks: fold them back
            self.expand.discard(group)
            self.refresh()
            return
        if self.view is not None and any(
            n.kind == "module" and n.module == module for n in self.view.nodes
        ):
            self.expand.add(module)
            self.collapse.discard(module)
        else:
            self.collapse.add(module)
            self.expand.discard(module)
        self.refresh()

    # ---- state -> widgets -------------------------------------------------------------------
    def refresh(self) -> None:
        """Rebuild the graph view, the chart and the readout from the newest run."""
        report = self.explorer.report
        self._remember(report, self.explorer.graph)
        # parameters the gradient never reached are drawn as ghosts where they live
        graph = add_ghosts(self.explorer.graph, report.none_reasons)
        depth, group, leaves = self._fold_args(graph)
        view = graph.view(depth, self.expand, self.collapse | leaves, group=group)
        hooked = hooked_ids(view, self.explorer.hooks, self.explorer.modifiers)
        # selection and hook markers are classes the page applies (node info, `selected`):
        # the DOT carries neither, so they never need a new layout
        colors = self._edge_colors(view, depth, self.expand, self.collapse)
        drawn = render_dot(view, edge_colors=colors)
        drawn_ids = drawn.node_ids
        info = {n.id: node_info(n, n.id in hooked) for n in view.nodes if n.id in drawn_ids}
        self.view = view
        index = [list(e) for e in search_index(graph, view)]
        self.pane.set_graph(drawn.dot, info, self._legend(), keys=drawn.keys, index=index)
        self._update_chart()
        self._update_readout()
        self._update_notes()
        self.controls.loss_label.value = loss_line_html(
            report, len(drawn_ids), drawn_count(graph), depth
        )
        self._set_status(report.summary(), "warning" if report.findings else "info")

    def _fold_args(self, graph: GradGraph) -> tuple[int | None, bool | None, frozenset[str]]:
        """(depth, group, leaf modules folded) of the view drawn for `graph`."""
        if self.depth == "auto":
            return self.first_view.auto_depth(graph, self.max_nodes, self.expand)
        return (self.depth if isinstance(self.depth, int) else None), None, frozenset()

    def reveal_name(self, name: str) -> None:
        """Unfold the modules (and ×N groups) folding module or parameter `name` away, redraw,
        and select its node: what the search box asks for on Enter."""
        graph = add_ghosts(self.explorer.graph, self.explorer.report.none_reasons)
        depth, group, leaves = self._fold_args(graph)

        def view_of(expand: frozenset[str]) -> GradGraph:
            return graph.view(depth, expand, (self.collapse | leaves) - expand, group=group)

        opened = unfold_to(graph, name, self.expand, view_of)
        self.expand |= opened
        self.collapse -= opened
        self.refresh()
        found = next((t for t in targets(graph, name) if self.view and t in self.view), None)
        self.selected = found or node_showing(self.view, (targets(graph, name) or [""])[0])
        self._set_status(f"unfolded to {plain_text(name)}", "info")

    def _update_readout(self) -> None:
        target = self.selected if self.controls.kind_box.value == "tensor" else self.selected_module
        self.readout.value = readout_html(
            self.explorer.events, target, self.explorer.hook_mechanisms
        )

    def _set_depth(self, value: Any) -> None:
        self.depth = None if value == "full" else value
        self.first_view.reset()
        self.expand.clear()
        self.collapse.clear()
        self.refresh()

    def _set_status(self, text: str, level: str) -> None:
        self.pane.set_status(text, level)

    def _fail(self, message: str, exc: BaseException | None = None) -> None:
        self.last_error = message
        self.last_exception = exc
        self._set_status(message, "error")

    def _failed(self, e: BaseException) -> None:
        """The guard's handler: any exception from a callback ends up here."""
        self._fail(error_text(e), e)

    def _queued(self, waiting: int) -> None:
        self._set_status(f"busy: {waiting} action(s) queued, they run when this one ends", "busy")

    def _layout_failed(self, message: str) -> None:
        if self.depth != 0:
            self.depth = 0
            self._fail(
                f"the browser could not lay out this graph ({message}); showing it folded "
                "to top-level modules"
            )
            self.refresh()

    @property
    def status_text(self) -> str:
        return self.pane.status_text


def compare_with(explorer: Session, baseline: Any = None, **options: Any) -> ExplorerWidget:
    """A widget on `explorer` already in compare mode, with `baseline` as run A (see
    `ExplorerWidget.compare`: another explorer, a report, a (report, graph) pair; None pins
    the explorer's current run).

    Example:
        >>> compare_with(GradExplorer(model, x, device="cuda"), cpu_explorer)  # doctest: +SKIP
    """
    widget = ExplorerWidget(explorer, **options)
    widget.compare(baseline)  # a failure shows in the status line, like a click's
    return widget
