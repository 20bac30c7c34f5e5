"""ExplorerWidget: the graph pane and the norms chart side by side, a toolbar, a hook readout.

Thin: every number comes from the explorer (pure torch analysis); this file only turns user
actions into explorer calls and the explorer's state into widget state. The explorer owns the
hooks, modifiers, thresholds and the newest run; the widget follows them (`on_change`), so it
shows the explorer's state whoever changed it: a click here, code in a cell, another widget.

One class, composed of parts that own their state: the toolbar (`controls.Toolbar`), the chart
(`chart.ChartView`), compare mode (`compare.CompareView`), settings changes that re-run and
undo (`actions.SettingsActions`), downloads and exports (`actions.ExportActions`) and the graph
pane (`graph_pane.GraphPane`). The widget owns the view (fold state, selection) and the status.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import ipywidgets as W

from .. import ids
from ..errors import GradExplorerError
from ..graph.ghosts import add_ghosts
from ..graph.grad_graph import GradGraph
from ..graph.groups import inside_group, unfolded_group_at
from ..graph.measure import drawn_measured
from ..graph.search import search_index, targets, unfold_to
from ..hooks.config import HOOK_KINDS
from ..render.chart import CHART_BOX_PX, empty_figure, figure_dict
from ..render.dot import hook_fields, node_info, render_dot
from ..render.hook_marks import hooked_at, hooked_clusters, plan_text
from ..render.readout import readout_html
from ..report.grad_report import GradReport
from ..vocabulary import plain_text
from .actions import ExportActions, SettingsActions
from .chart import ChartView
from .compare import Baseline, CompareView
from .controller import (
    ActionGuard,
    device_in_force,
    drawn_count,
    error_text,
    explain_click,
    find_node,
    loss_line_html,
    module_of,
    node_showing,
    node_showing_module,
    quiet_reason,
    status_line,
)
from .controls import Toolbar, depth_options
from .first_view import FirstView
from .graph_pane import GraphPane
from .options import checked_chart_mode, checked_depth, checked_height, checked_max_nodes
from .session import Session

#: the chart before any run succeeded (the status line says what failed)
NO_RUN = "No run yet: the first run failed (the status line says why). Fix it, then press Run."
_NO_RUN_FIGURE = empty_figure(NO_RUN)

# taller charts (more than ~40 flat bars) scroll inside their box, with a hint at its bottom;
# up to ~40 fit whole (render/chart.chart_shape squeezes their rows)
CHART_MAX_HEIGHT = f"{CHART_BOX_PX}px"


#: the status line of a view drawing flow the newest run (made for another view) did not measure
NOT_MEASURED_HERE = (
    "the newest run measured the flow another view draws: dotted grey parts are not "
    "measured here (press Run to measure them)"
)
#: what a click's re-run measures of the flow (`ExplorerWidget(flow=...)`)
FLOW_MODES = ("view", "all")


def _flow_mode(flow: str) -> str:
    """`flow` checked: "view" (a click's re-run measures the flow its view draws, faster on
    large models; the first unfold after it runs again, in full) or "all" (every edge at
    every run; unfolds never run)."""
    if flow not in FLOW_MODES:
        raise GradExplorerError(f"flow must be one of {FLOW_MODES}, got {flow!r}")
    return flow


class ExplorerWidget(W.VBox):
    """What `GradExplorer.show()` returns.

    Every callback (graph clicks, toolbar changes, bar clicks, the explorer's notices) runs
    through one guard: any exception shows in the status line, the busy state ends and the last
    good view stays. A change whose re-run fails (a hook toggled, a modifier, the device, the
    thresholds) is undone, so the hooks Python uses and the markers the page shows always agree.

    Example:
        >>> ExplorerWidget(GradExplorer(model, x))     # doctest: +SKIP
    """

    #: what the status line says went wrong last (None: nothing since the newest good run)
    last_error: str | None

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
        flow: str = "view",
    ) -> None:
        if hook_kind not in HOOK_KINDS:
            raise GradExplorerError(f"hook_kind must be one of {HOOK_KINDS}, got {hook_kind!r}")
        self.flow = _flow_mode(flow)
        chart_mode, height = checked_chart_mode(chart_mode), checked_height(height)
        self.explorer, self.last_error = explorer, None
        self.max_nodes = checked_max_nodes(max_nodes)
        self.depth = checked_depth(depth)
        self.expand: set[str] = set()
        self.collapse: set[str] = set()
        self._measuring = False  # a re-run for a view that drew unmeasured flow is under way
        self._selected: str | None = None
        self.selected_module: str | None = None
        self.view: GradGraph | None = None
        #: what the loss line of the view drawn was made from (redrawn as stale on a failed run)
        self._loss_args: dict[str, Any] | None = None
        self.last_exception: BaseException | None = None
        self.runs = 0  # runs this widget has drawn
        self._shown: GradReport | None = None  # the run drawn now
        self.guard = ActionGuard(self._failed, self._queued)
        self.pane = GraphPane(height=height)
        self.readout = W.HTML(readout_html([], None, {})).add_class("gv-readout-box")
        first_error = self._first_run()
        first = figure_dict(explorer.report, chart_mode) if not first_error else _NO_RUN_FIGURE
        self.pane.layout.width = "100%"  # the pane fills its box (a flex row would shrink it)
        self.chart_view = ChartView(
            first, chart_mode, self.guard, self.select_param, self._pick,
            width=lambda: self.first_view.chart_width,
        )  # fmt: skip
        self.compare_view = CompareView()
        self.controls = self._toolbar(hook_kind, chart_mode, first_error is None)
        self.settings = SettingsActions(
            explorer, self.controls, self._set_status, self._fail, self._ran, self.measure_view
        )
        self.exports = ExportActions(
            explorer, self.pane, self.guard, Path(export_dir), self._set_status, self._fail
        )
        self._wire()
        body = self._wire_pane()
        super().__init__([self.toolbar, self.notes, body, self.readout])
        self.add_class("gv-explorer")  # the toolbar is "gv-toolbar" (controls.Toolbar)
        if first_error is None:
            self.guard.call(self.refresh)
        else:
            self._fail(first_error)
        self._following = explorer.on_change(self._explorer_changed)

    # ---- the parts, as the widget's public attributes ----------------------------------------
    @property
    def chart(self) -> Any:
        """The norms chart (a plotly FigureWidget)."""
        return self.chart_view.figure

    @property
    def notes(self) -> W.HTML:
        """The line under the toolbar: compare summary, per-rank gaps."""
        return self.compare_view.notes

    @property
    def toolbar(self) -> W.VBox:
        return self.controls.box

    @property
    def baseline(self) -> tuple[GradReport, GradGraph | None] | None:
        """Compare mode's run A (None outside compare mode)."""
        return self.compare_view.baseline

    @property
    def export_dir(self) -> Path:
        """Default folder of export_svg / export_csv / export_json (the Python API)."""
        return self.exports.export_dir

    @export_dir.setter
    def export_dir(self, folder: str | Path) -> None:
        self.exports.export_dir = Path(folder)

    @property
    def status_text(self) -> str:
        return self.pane.status_text

    # ---- building ---------------------------------------------------------------------------
    def _toolbar(self, hook_kind: str, chart_mode: str, ran: bool) -> Toolbar:
        ex = self.explorer
        current = device_in_force(ex)
        devices = list(dict.fromkeys([current, *ex.available_devices()]))
        deepest = ex.graph.max_depth if ran else 1
        if isinstance(self.depth, int) and self.depth >= max(deepest, 1):
            self.depth = None  # deeper than the graph folds: every node, as "full"
        depth = "full" if self.depth is None else self.depth
        return Toolbar(
            self.guard, devices, current, hook_kind, chart_mode, ex.thresholds,
            depth_options(deepest), depth,
        )  # fmt: skip

    def _wire(self) -> None:
        """Each control to its action (the toolbar runs them through the guard). Actions are
        looked up when they run, so a method replaced on the instance is the one called."""
        c = self.controls
        c.on_click(c.run_button, lambda: self.rerun())
        c.on_click(c.clear_button, lambda: self.clear_hooks())
        c.on_click(c.apply_modifier, lambda: self.apply_modifier_to_selected())
        downloads = (
            lambda: self.download_svg(),
            lambda: self.download_csv(),
            lambda: self.download_json(),
        )
        for button, action in zip(c.export_buttons, downloads):
            c.on_click(button, action)
        c.on_change(c.device_box, lambda new: self.set_device(new))
        c.on_change(c.mode_box, lambda _: self._update_chart())
        c.on_change(c.vanishing_box, lambda _: self.set_thresholds())
        c.on_change(c.exploding_box, lambda _: self.set_thresholds())
        c.on_change(c.depth_box, lambda new: self._set_depth(new))
        c.on_change(c.kind_box, lambda _: self._update_readout())
        c.on_change(c.compare_button, lambda on: self._compare_toggled(on))
        g = self.guard.wrap
        self.pane.on_node_click(g(lambda node_id: self.click_node(node_id)))
        self.pane.on_toggle_scope(g(lambda module: self.toggle_scope(module)))
        self.pane.on_layout_error(g(lambda message: self._layout_failed(message)))
        self.pane.on_reveal(g(lambda name: self.reveal_name(name)))

    def _wire_pane(self) -> W.HBox:
        """The body (graph and chart) and its `FirstView`, which the page's fit and resize
        reports drive."""
        g = self.guard.wrap
        body = self._body()
        self.first_view = FirstView(
            (body, *body.children),  # type: ignore[arg-type]
            self.refresh,
            self._update_chart,
            lambda: self.depth == "auto" and not (self.expand or self.collapse),
            lambda: self.pane.revision,
            readout=self.readout,
        )
        self.pane.on_fit(g(lambda r: self.first_view.fitted(r, len(self.pane.nodes))))
        self.pane.on_resize(g(lambda cell: self.first_view.resized(cell)))
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
            return None
        try:
            self.explorer.run(ranks=False)  # shown on one rank: never a collective
        except Exception as e:  # noqa: BLE001 - shown in the status line
            self.last_exception = e
            return error_text(e)
        return None

    def close(self) -> None:
        """Close the widget; the explorer stops telling it its changes."""
        following = getattr(self, "_following", None)  # None: closed before it was built
        if following is not None:
            following.remove()
            # ipywidgets (and anywidget, for the pane and the chart) keep open widgets alive,
            # and through their callbacks they would keep this one
            self.chart_view.close()
            for part in _descendants(self):
                part.close()
        super().close()

    # ---- following the explorer --------------------------------------------------------------
    def _explorer_changed(self, what: str) -> None:
        """The explorer's notice: its hooks, modifiers, thresholds or newest run changed (from
        code, or another widget). A change this widget makes draws its result when it ends."""
        if not self.settings.acting:
            self.guard.call(self.follow, what)

    def follow(self, what: str = "") -> None:
        """Show the explorer's state now: a new newest run is drawn whole; hooks, modifiers or
        thresholds changed since it show as markers, in the toolbar and in the status line."""
        ex = self.explorer
        if ex.closed:
            self._fail("this explorer was closed; create a new GradExplorer to explore again")
            return
        self.controls.show_settings(device_in_force(ex), ex.thresholds)
        if what == "failed" and ex.failure is not None:  # ex.run() raised in a cell
            shown = "showing the last good run" if self._shown else "no run has succeeded yet"
            said = f"ex.run() failed: {error_text(ex.failure)}; {shown}"
            self._fail(said, ex.failure, run_failed=True)
            return
        newest = ex.history[-1] if ex.history else None
        if newest is not None and newest is not self._shown:
            self.last_error = None
            self.refresh(measure=False)  # another's run: re-running here could answer it back
        elif self.view is not None:
            self._mark_hooks(self.view)
            self._update_readout()
            if ex.stale:
                th = ex.thresholds
                now = (
                    f"thresholds vanishing < {th.vanishing:g}, exploding > {th.exploding:g}"
                    if what == "thresholds"
                    else plan_text(ex.hooks, ex.modifiers)
                )
                self._set_status(
                    f"{now}; changed since the newest run: press Run (or call ex.run()) to see "
                    "the effect",
                    "info",
                )
            else:
                self._show_summary()

    def _mark_hooks(self, view: GradGraph) -> None:
        """The hook markers of the plan in force on the nodes drawn (no new layout)."""
        ex = self.explorer
        hooked = hooked_at(view, ex.hooks, ex.modifiers)
        with self.pane.hold_sync():
            self.pane.nodes = {
                i: {**n, **hook_fields(hooked.get(i, ()))} for i, n in self.pane.nodes.items()
            }
            self.pane.clusters = hooked_clusters(view, ex.hooks, ex.modifiers)

    # ---- actions (also callable from Python and tests) -------------------------------------
    def rerun(self) -> bool:
        """Forward + backward again; on failure the error shows and the last good view stays."""
        return self.settings.apply(None, "")

    def set_device(self, device: str) -> None:
        """Run on `device`; if that fails, the device in force stays (and the menu shows it)."""
        self.settings.set_device(device)

    def set_thresholds(self) -> None:
        """Classify with the thresholds the toolbar shows (a rejected pair reverts)."""
        self.settings.set_thresholds()

    def clear_hooks(self) -> None:
        self.settings.clear_hooks()

    def apply_modifier_to_selected(self) -> None:
        self.settings.apply_modifier(self.selected_module)

    def download_svg(self) -> None:
        self.exports.download_svg()

    def download_csv(self) -> None:
        self.exports.download_csv()

    def download_json(self) -> None:
        self.exports.download_json()

    def export_svg(self, folder: str | Path | None = None, done: Any = None) -> None:
        """Save the graph as laid out in the browser to folder/graph.svg (on the server)."""
        self.exports.export_svg(folder, done)

    def export_csv(self, folder: str | Path | None = None) -> Path:
        """Write folder/grad_norms.csv on the server."""
        return self.exports.export_csv(folder)

    def export_json(self, folder: str | Path | None = None) -> Path:
        """Write folder/grad_report.json on the server."""
        return self.exports.export_json(folder)

    def click_node(self, node_id: str) -> None:
        """Toggle the chosen kind of hook on the clicked node's module (or node), re-run."""
        with self.pane.hold_sync():  # Python owns the selection: the page only sent a click
            self.selected = node_id
            self.pane.highlight = []  # a new selection ends the bar-click dimming
        node = find_node(node_id, self.view, self.explorer.graph)
        kind = self.controls.kind
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
        if target is None:  # a click on the loss or an input: nothing went wrong
            what = "an input" if node.kind == "input" else "the loss"
            self._set_status(
                f"{what} is not inside a module of the model, so it has no module to hook: "
                "click a node of the model to hook its module",
                "info",
            )
            return
        self.selected_module = target if kind != "tensor" else node.module
        state: dict[str, bool] = {}

        def toggle() -> None:
            state["on"] = self.explorer.toggle_hook(target, kind)

        where = target or "(root)"
        if self.settings.apply(toggle, f"{kind} hook at {where}"):
            verb = "on" if state["on"] else "off"
            ex = self.explorer
            # the click's own hook leads; how many are on, when it is not the only one, follows
            # at once (the list itself comes after the run's headline, often past the ellipsis)
            others = f" ({len(ex.hooks)} hooks on)" if len(ex.hooks) > 1 else ""
            self._set_status(
                f"{kind} hook {verb} at {where}{others}; "
                + status_line(ex.report, ex.hooks, ex.modifiers),
                "info",
            )
        else:
            self._update_readout()

    def toggle_scope(self, module: str) -> None:
        """Fold or unfold one module (a module path, as the page sends it); it re-runs only
        where the new view draws flow the newest run did not measure."""
        modules = self.explorer.graph.modules
        folded = self.view is not None and any(
            n.kind == "module" and n.module == module for n in self.view.nodes
        )  # a block drawn folded inside an unfolded ×N group opens, as any folded module
        group = None if folded else unfolded_group_at(module, self.expand, modules)
        if group is not None:  # the frame around unfolded ×N blocks: fold them back, whole
            self.expand -= {group, *(p for p in self.expand if inside_group(p, group, modules))}
            self.refresh()
            return
        if folded:
            self.expand.add(module)
            self.collapse.discard(module)
        else:
            self.collapse.add(module)
            self.expand.discard(module)
        self.refresh()

    # ---- compare mode (its state is the compare view's) ----------------------------------------
    def compare(self, baseline: Baseline = None) -> None:
        """Enter compare mode with `baseline` as A and the newest run as B.

        `baseline`: None (the current run: re-run after a change to see B differ), a
        GradReport (its norms; edges then stay uncoloured: a report has no graph), another
        GradExplorer (its newest run), a (report, graph) pair, or an int indexing the runs this
        widget has shown (`-2`: the run before the newest).

        Example:
            >>> w.compare(); net.gate.bias.data.fill_(1.0); w.rerun()   # doctest: +SKIP
        """
        self.guard.call(self._switch, baseline, True)

    def end_compare(self) -> None:
        """Leave compare mode: the normal chart, edge colours and legend come back."""
        self.guard.call(self._switch, None, False)

    def _compare_toggled(self, on: bool) -> None:
        self._switch(None, on)  # already under the guard (a control's observer)

    def _switch(self, baseline: Baseline, on: bool) -> None:
        """Enter (`on`) or leave compare mode; on failure the mode in force stays (the toggle
        shows it) and the guard shows the error."""
        cv, ex = self.compare_view, self.explorer
        before = cv.baseline
        try:
            cv.baseline = cv.resolve(baseline, ex.report, ex.graph) if on else None
            mine = getattr(ex, "label", None)
            cv.names = (mine if baseline is None else getattr(baseline, "label", None), mine)
            self.controls.set_quietly(self.controls.compare_button, on)
            self.refresh()
        except Exception:
            cv.baseline = before
            self.controls.set_quietly(self.controls.compare_button, before is not None)
            with contextlib.suppress(Exception):  # best effort: the view of the mode in force
                self.refresh()
            raise

    # ---- selection (the widget owns it; the page shows it as a class) -------------------------
    @property
    def selected(self) -> str | None:
        """The selected node id (Python owns it; the page shows it as a class)."""
        return self._selected

    @selected.setter
    def selected(self, node_id: str | None) -> None:
        self._selected = node_id
        self.pane.selected = node_id or ""

    def select_param(self, name: str) -> str | None:
        """Select the graph node showing parameter `name` (its own node, its ghost where no
        gradient reached it, or the folded module holding either)."""
        try:
            record = self.explorer.report.param(name)
        except KeyError as e:
            self._fail(str(e))
            return None
        node_id = node_showing(self.view, ids.param_id(name))
        # a parameter no gradient reached is drawn as a ghost: its node, or the box folding it
        ghost = node_showing(self.view, ids.ghost_id(ids.param_id(name))) if not node_id else None
        self._reveal(node_id or ghost, record.module)
        if node_id is None:
            where = "is drawn dashed (no gradient)" if ghost else "has no node in the graph"
            self._set_status(f"{name} {where}: {record.none_reason}", "warning")
        self._update_chart()
        self._update_readout()
        return node_id or ghost

    def _pick(self, module: str) -> None:
        """A bar of the per-module chart was clicked."""
        self._reveal(node_showing_module(self.view, module), module)
        self._update_chart()

    def _reveal(self, node_id: str | None, module: str) -> None:
        """Select `module` for the chart and readout; highlight and centre its node if drawn."""
        self.selected_module = module
        with self.pane.hold_sync():
            self.pane.highlight = [node_id] if node_id else []
            self._selected = node_id
            if node_id:
                self.pane.selected = node_id

    # ---- state -> widgets -------------------------------------------------------------------
    def refresh(self, measure: bool = True) -> None:
        """Rebuild the graph view, the chart and the readout from the newest run. Everything is
        built before anything is shown: a failure leaves the last good view. A view drawing
        flow the newest run did not measure (this widget's re-runs measure what its view
        draws) runs again first, measuring every edge, when `measure`."""
        ex, cv = self.explorer, self.compare_view
        report, graph = ex.report, ex.graph
        if self._shown is not None and report is not self._shown:
            self.first_view.ran()  # a re-run keeps the auto depth shown
        # parameters the gradient never reached are drawn as ghosts where they live
        full = add_ghosts(graph, report.none_reasons)
        depth, group, leaves = self._fold_args(full)
        view = full.view(depth, self.expand, self.collapse | leaves, group=group)
        tracked = getattr(ex, "track_flow", True)  # without, nothing would measure the flow
        if measure and tracked and not self._measuring and not drawn_measured(view):
            self._measuring = True
            try:  # in full: the next unfolds draw at once; draws the new run when it has run
                self.settings.apply(None, "", run=True, whole=True)
            finally:
                self._measuring = False
            return
        # a folded module or ×N group holding a hooked module carries the marker too
        hooked = hooked_at(view, ex.hooks, ex.modifiers)
        # selection and hook markers are classes the page applies (node info, `selected`):
        # the DOT carries neither, so they never need a new layout
        drawn = render_dot(
            view, edge_colors=cv.edge_colors(view, depth, self.expand, self.collapse)
        )
        info = {
            n.id: node_info(n, hooked.get(n.id, ())) for n in view.nodes if n.id in drawn.node_ids
        }
        mode = self.controls.mode
        figure = self.chart_view.figure_for(report, mode, self.selected_module, cv.baseline_report)
        legend, notes = cv.legend(), cv.notes_html(report)
        self._loss_args = {
            "report": report, "drawn": len(drawn.node_ids), "total": drawn_count(full),
            "depth": depth, "auto": self.depth == "auto", "leaves": bool(leaves),
            "by_hand": self._by_hand(depth),
        }  # fmt: skip
        loss = loss_line_html(**self._loss_args)
        # built: show it
        cv.remember(report, graph)
        if report is not self._shown:
            self._shown = report
            self.runs += 1
        self.view = view
        index = [list(e) for e in search_index(full, view)]
        frames = hooked_clusters(view, ex.hooks, ex.modifiers)
        self.pane.set_graph(drawn.dot, info, legend, keys=drawn.keys, index=index, clusters=frames)
        self.chart_view.show(figure, mode)
        self._update_readout()
        cv.show_notes(notes)
        self.controls.loss_label.value = loss
        self._show_summary()

    def measure_view(self) -> dict[str, Any] | None:
        """The view drawn now, as `GradExplorer.run(view=...)` takes it: what this widget's
        re-runs measure the flow of (None: everything; before the first run, with
        `flow="all"`)."""
        if not self.explorer.history or self.flow == "all":
            return None
        graph = add_ghosts(self.explorer.graph, self.explorer.report.none_reasons)
        depth, _, leaves = self._fold_args(graph)
        return {
            "depth": depth,
            "expand": sorted(self.expand),
            "collapse": sorted(self.collapse | leaves),
        }

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

    def _ran(self) -> None:
        """A change of this widget ran: draw the new run."""
        self.last_error = None
        self.refresh()

    def _update_chart(self) -> None:
        report, mode = self.explorer.report, self.controls.mode
        baseline = self.compare_view.baseline_report
        self.chart_view.show(
            self.chart_view.figure_for(report, mode, self.selected_module, baseline), mode
        )

    def _update_readout(self) -> None:
        target = self.selected if self.controls.kind == "tensor" else self.selected_module
        ex = self.explorer
        if target is None and ex.events:  # hooks set in code and run: show the first one's
            target = ex.events[0].target
        # "" is the root module (a click on an op at the top level): a target like any other
        quiet = quiet_reason(ex.hooks, ex.graph, ex.report, target) if target is not None else ""
        self.readout.value = readout_html(ex.events, target, ex.hook_mechanisms, quiet)

    def _by_hand(self, depth: int | None) -> tuple[int, int]:
        """Modules unfolded and folded by double-click that change the view at `depth` (one
        folded back where the depth folds it anyway is none)."""
        closed = [m for m in self.collapse if depth is None or m.count(".") < depth]
        return len(self.expand), len(closed)

    def _set_depth(self, value: Any) -> None:
        self.depth = None if value == "full" else value
        self.first_view.reset()
        self.expand.clear()
        self.collapse.clear()
        self.refresh()

    def _show_summary(self) -> None:
        ex = self.explorer
        report = ex.report
        # the loss, its description and the device are in the header line above the pane; the
        # run's headline leads, the hooks in force and the findings follow (status_line)
        text = status_line(report, ex.hooks, ex.modifiers)
        if self.view is not None and not drawn_measured(self.view):  # another's run
            text = f"{NOT_MEASURED_HERE}; {text}"
        self._set_status(text, "warning" if report.findings else "info")

    def _set_status(self, text: str, level: str) -> None:
        self.pane.set_status(text, level)

    def _fail(
        self, message: str, exc: BaseException | None = None, run_failed: bool = False
    ) -> None:
        self.last_error = message
        self.last_exception = exc
        self._set_status(message, "error")
        if run_failed and self._loss_args is not None:
            self.controls.loss_label.value = loss_line_html(**self._loss_args, stale=True)

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


def _descendants(box: W.Box) -> list[W.Widget]:
    """Every widget inside `box`, depth first (boxes included)."""
    out: list[W.Widget] = []
    for child in box.children:
        out += [child, *(_descendants(child) if isinstance(child, W.Box) else [])]
    return out


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
