"""ExplorerWidget: the graph pane and the norms chart side by side, a toolbar, a hook readout.

Thin: every number comes from the explorer (pure torch analysis); this file only turns user
actions into explorer calls and explorer results into widget state.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ipywidgets as W
import plotly.graph_objects as go

from .chart import figure_dict
from .errors import GradExplorerError
from .explorer import GradExplorer
from .export import report_csv, report_json
from .graph import GradGraph, GradNode
from .graph_pane import GraphPane
from .hook_config import HOOK_KINDS
from .readout import readout_html
from .render import format_norm, legend, to_dot
from .stats import Thresholds
from .widget_controls import Controls

CHART_WIDTH = 520


class ExplorerWidget(W.VBox):
    """What `GradExplorer.show()` returns.

    Example:
        >>> ExplorerWidget(GradExplorer(model, x))     # doctest: +SKIP
    """

    def __init__(
        self,
        explorer: GradExplorer,
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
        self.depth = depth
        self.expand: set[str] = set()
        self.collapse: set[str] = set()
        self.selected: str | None = None
        self.selected_module: str | None = None
        self.export_dir = Path(export_dir)
        self.view: GradGraph | None = None
        self.last_error: str | None = None
        self.runs = 0

        self.pane = GraphPane(height=height)
        self.chart = go.FigureWidget()
        self.chart.layout.update(height=460, width=CHART_WIDTH, autosize=False)
        self.readout = W.HTML(readout_html([], None, {}))
        first_error = self._first_run()
        self._build_toolbar(hook_kind, chart_mode)
        self.pane.on_node_click(self.click_node)
        self.pane.on_toggle_scope(self.toggle_scope)
        self.pane.on_layout_error(self._layout_failed)
        # the chart has a fixed width (plotly cannot size itself from a flex box that has no
        # width yet at first draw); the graph takes the rest; narrow outputs wrap
        body = W.HBox([W.Box([self.pane], layout=W.Layout(flex="1 1 420px", min_width="360px")),
                       W.Box([self.chart], layout=W.Layout(flex="0 0 auto"))],
                      layout=W.Layout(width="100%", flex_flow="row wrap"))
        super().__init__([self.toolbar, body, self.readout])
        if first_error is None:
            self.refresh()
        else:
            self._fail(first_error)

    def _first_run(self) -> str | None:
        """Use the explorer's newest run if still current, or run once; the error text if that
        fails."""
        if not self.explorer.stale:
            self.runs = 1
            return None
        try:
            self.explorer.run()
        except GradExplorerError as e:
            return str(e)
        self.runs = 1
        return None

    # ---- toolbar -----------------------------------------------------------------------------
    def _build_toolbar(self, hook_kind: str, chart_mode: str) -> None:
        ex = self.explorer
        current = ex.device or str(ex.model_device)
        devices = list(dict.fromkeys([current, *ex.available_devices()]))
        c = self.controls = Controls(devices, current, hook_kind, chart_mode, ex.thresholds,
                                     self._depth_options(), self._depth_value())
        c.run_button.on_click(lambda _: self.rerun())
        c.clear_button.on_click(lambda _: self.clear_hooks())
        c.apply_modifier.on_click(lambda _: self.apply_modifier_to_selected())
        c.device_box.observe(lambda ch: self.set_device(ch["new"]), "value")
        c.mode_box.observe(lambda ch: self._update_chart(), "value")
        c.vanishing_box.observe(lambda ch: self.set_thresholds(), "value")
        c.exploding_box.observe(lambda ch: self.set_thresholds(), "value")
        c.depth_box.observe(lambda ch: self._set_depth(ch["new"]), "value")
        for button, action in zip(c.export_buttons,
                                  (self.export_svg, self.export_csv, self.export_json)):
            button.on_click(lambda _, act=action: self._guard(act, self.export_dir))
        self.toolbar = c.box

    def _depth_options(self) -> list[tuple[str, Any]]:
        deepest = self.explorer.graph.max_depth if self.explorer._last is not None else 1
        return [("auto", "auto"), ("full", "full")] + [(str(d), d) for d in range(0, max(deepest, 1))]

    def _depth_value(self) -> Any:
        return "full" if self.depth is None else self.depth

    # ---- actions (also callable from Python and tests) -------------------------------------
    def rerun(self) -> bool:
        """Forward + backward again; on failure the error shows and the last good view stays."""
        self._set_status("running forward + backward…", "busy")
        try:
            self.explorer.run()
        except GradExplorerError as e:
            self._fail(str(e))
            return False
        self.runs += 1
        self.last_error = None
        self.refresh()
        return True

    def click_node(self, node_id: str) -> None:
        """Toggle the chosen kind of hook on the clicked node's module (or node), re-run."""
        self.selected = node_id
        node = self._node(node_id)
        kind = self.controls.kind_box.value
        if node is None:
            self._fail(f"node {node_id!r} is not in the current graph; re-run to refresh")
            return
        target = node_id if kind == "tensor" else _module_of(node)
        if kind == "tensor" and node.kind != "op":
            self._fail(f"tensor hooks go on op nodes; {node_id} is a {node.kind} node. "
                       "Pick a module hook kind to hook its module.")
            return
        if target is None:
            self._fail(f"{node_id} is not inside a module of the model (the loss or an input); "
                       "click a node of the model to hook its module")
            return
        self.selected_module = target if kind != "tensor" else node.module
        try:
            on = self.explorer.toggle_hook(target, kind)
        except GradExplorerError as e:
            self._fail(str(e))
            return
        if self.rerun():
            verb = "on" if on else "off"
            self._set_status(f"{kind} hook {verb} at {target or '(root)'}; "
                             + self.explorer.report.summary(), "info")

    def toggle_scope(self, module: str) -> None:
        """Fold or unfold one module in the graph (no re-run)."""
        path = module.split("@", 1)[0]
        if self.view is not None and any(n.kind == "module" and n.module == path
                                         for n in self.view.nodes):
            self.expand.add(path)
            self.collapse.discard(path)
        else:
            self.collapse.add(path)
            self.expand.discard(path)
        self.refresh()

    def select_param(self, name: str) -> str | None:
        """Select the graph node showing parameter `name` (its own node or its folded module)."""
        try:
            record = self.explorer.report.param(name)
        except KeyError as e:
            self._fail(str(e))
            return None
        node_id = self._node_showing(f"param:{name}")
        self.selected = node_id
        self._reveal(node_id, record.module)
        if node_id is None:
            self._set_status(f"{name} has no node in the graph: {record.none_reason}", "warning")
        self._update_chart()
        self._update_readout()
        return node_id

    def set_device(self, device: str) -> None:
        try:
            self.explorer.run(device=device)
        except GradExplorerError as e:
            self._fail(str(e))
            return
        self.refresh()

    def set_thresholds(self) -> None:
        try:
            self.explorer.thresholds = Thresholds(self.controls.vanishing_box.value, self.controls.exploding_box.value)
        except ValueError as e:
            self._fail(str(e))
            return
        self.rerun()

    def clear_hooks(self) -> None:
        self.explorer.clear_hooks()
        self.rerun()

    def apply_modifier_to_selected(self) -> None:
        target = self.selected_module
        if target is None:
            self._fail("select a node first: the modifier goes on its module")
            return
        kind = self.controls.modifier_box.value
        try:
            if kind == "none":
                self.explorer.set_modifier(target)
            else:
                self.explorer.set_modifier(target, **{kind: self.controls.modifier_value.value})
        except GradExplorerError as e:
            self._fail(str(e))
            return
        self.rerun()

    # ---- export --------------------------------------------------------------------------------
    def export_svg(self, folder: str | Path = "gradviz_export",
                   done: Callable[[Path], Any] | None = None) -> None:
        """Save the graph as laid out in the browser (no binary needed) to folder/graph.svg."""
        path = Path(folder) / "graph.svg"

        def save(svg: str) -> None:
            if not svg:
                self._fail("nothing laid out yet to export")
                return
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(svg, encoding="utf-8")
            self._set_status(f"graph saved to {path}", "info")
            if done:
                done(path)

        self.pane.request_svg(save)

    def export_csv(self, folder: str | Path = "gradviz_export") -> Path:
        path = Path(folder) / "grad_norms.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report_csv(self.explorer.report), encoding="utf-8")
        self._set_status(f"norms saved to {path}", "info")
        return path

    def export_json(self, folder: str | Path = "gradviz_export") -> Path:
        path = Path(folder) / "grad_report.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report_json(self.explorer.report, self.explorer.graph), encoding="utf-8")
        self._set_status(f"report saved to {path}", "info")
        return path

    # ---- state -> widgets -------------------------------------------------------------------
    def refresh(self) -> None:
        """Rebuild the graph view, the chart and the readout from the newest run."""
        graph = self.explorer.graph
        depth = graph.auto_depth(self.max_nodes) if self.depth == "auto" else self.depth
        self.view = graph.view(depth, self.expand, self.collapse)
        hooked = self._hooked_ids(self.view)
        report = self.explorer.report
        dot = to_dot(self.view, hooked=hooked, selected=self.selected)
        info = {n.id: _node_info(n, n.id in hooked, self.view) for n in self.view.nodes}
        self.pane.set_graph(dot, info, legend())
        self._update_chart()
        self._update_readout()
        self.controls.loss_label.value = (f"<b>loss</b> {format_norm(report.loss)} = "
                                 f"{report.loss_description} · {report.device} · "
                                 f"{len(self.view.nodes)} of {len(graph.nodes)} nodes shown"
                                 + (f" (folded at depth {depth})" if depth is not None else ""))
        self._set_status(report.summary(), "warning" if report.findings else "info")

    def _update_chart(self) -> None:
        fig = figure_dict(self.explorer.report, self.controls.mode_box.value, self.selected_module)
        with self.chart.batch_update():
            if len(self.chart.data) != len(fig["data"]):
                self.chart.data = ()
                for trace in fig["data"]:
                    self.chart.add_trace(trace)
                self.chart.data[0].on_click(self._bar_clicked)
            else:
                for trace, new in zip(self.chart.data, fig["data"]):
                    trace.update(new, overwrite=True)
            self.chart.layout.update(fig["layout"], overwrite=True)
            self.chart.layout.update(width=CHART_WIDTH, autosize=False)

    def _update_readout(self) -> None:
        target = self.selected if self.controls.kind_box.value == "tensor" else self.selected_module
        self.readout.value = readout_html(self.explorer.events, target,
                                          self.explorer.hook_mechanisms)

    def _bar_clicked(self, trace: Any, points: Any, state: Any) -> None:
        if not points.point_inds:
            return
        row = trace.customdata[points.point_inds[0]]
        if self.controls.mode_box.value == "param":
            self.select_param(row[0])
        else:
            self._reveal(self._node_showing_module(row[1]), row[1])
            self._update_chart()

    def _reveal(self, node_id: str | None, module: str) -> None:
        """Select `module` for the chart and readout; highlight and centre its node if drawn."""
        self.selected_module = module
        with self.pane.hold_sync():
            self.pane.highlight = [node_id] if node_id else []
            if node_id:
                self.pane.selected = node_id

    def _hooked_ids(self, view: GradGraph) -> set[str]:
        targets = {t for t, k in self.explorer.hooks if k != "tensor"}
        targets |= set(self.explorer.modifiers)
        nodes = {t for t, k in self.explorer.hooks if k == "tensor"}
        return {n.id for n in view.nodes
                if n.id in nodes or (n.kind in ("op", "module") and n.module in targets)}

    def _node(self, node_id: str) -> GradNode | None:
        for graph in (self.view, self.explorer.graph):
            if graph is not None and node_id in graph:
                return graph.node(node_id)
        return None

    def _node_showing(self, node_id: str) -> str | None:
        if self.view is None:
            return None
        if node_id in self.view:
            return node_id
        for n in self.view.nodes:
            if node_id in n.members:
                return n.id
        return None

    def _node_showing_module(self, module: str) -> str | None:
        if self.view is None:
            return None
        for n in self.view.nodes:
            if n.module == module:
                return n.id
        return None

    def _set_depth(self, value: Any) -> None:
        self.depth = None if value == "full" else value
        self.expand.clear()
        self.collapse.clear()
        self.refresh()

    def _set_status(self, text: str, level: str) -> None:
        self.pane.set_status(text, level)

    def _fail(self, message: str) -> None:
        self.last_error = message
        self._set_status(message, "error")

    def _layout_failed(self, message: str) -> None:
        if self.depth != 0:
            self.depth = 0
            self._fail(f"the browser could not lay out this graph ({message}); showing it folded "
                       "to top-level modules")
            self.refresh()

    def _guard(self, action: Callable, *args: Any) -> None:
        try:
            action(*args)
        except (GradExplorerError, OSError) as e:
            self._fail(str(e))

    @property
    def status_text(self) -> str:
        return self.pane.status_text


def _module_of(node: GradNode) -> str | None:
    """The module a click on `node` hooks (None for the loss, inputs and the output)."""
    if node.module == "loss" or node.kind in ("output", "input"):
        return None
    return node.module


def _node_info(n: GradNode, hooked: bool, view: GradGraph) -> dict[str, Any]:
    folded = n.kind == "module"
    return {
        "label": n.label, "op": n.op, "module": n.module or "(root)", "kind": n.kind,
        "status": n.status,
        # JSON has no NaN/Inf: non-finite norms travel as their text
        "grad_norm": n.grad_norm if n.grad_norm is None or math.isfinite(n.grad_norm)
        else format_norm(n.grad_norm),
        "shape": list(n.shape) if n.shape is not None else None, "hooked": hooked,
        "expandable": n.module if folded else "",
        "collapsible": n.module if (not folded and n.module not in ("", "loss")) else "",
    }
