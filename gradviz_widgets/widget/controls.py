"""The explorer widget's toolbar: its controls (ipywidgets, created in one place, no behaviour)
and, as a mixin of ExplorerWidget, the wiring of each control to an action through the guard.

Every input has a description (ipywidgets ties it to the input as its label: the accessible
name) or a visible text; descriptions are plain text (``description_allow_html`` stays off).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as W

from ..hooks.config import HOOK_KINDS
from ..vocabulary import Thresholds

# labels never cut: descriptions take the width their text needs ("initial"), buttons size to
# their text ("auto") and each row wraps when the output is narrow
LABEL = {"description_width": "initial"}
WRAP = {"flex_flow": "row wrap", "align_items": "center", "width": "100%"}


def _dropdown(options: list, value: Any, description: str, min_width: str) -> W.Dropdown:
    return W.Dropdown(
        options=options,
        value=value,
        description=description,
        style=LABEL,
        layout=W.Layout(width="auto", min_width=min_width),
    )


def _button(description: str, tooltip: str, icon: str = "", **kw: Any) -> W.Button:
    return W.Button(
        description=description, icon=icon, tooltip=tooltip, layout=W.Layout(width="auto"), **kw
    )


def _float(value: float, description: str, width: str) -> W.FloatText:
    return W.FloatText(
        value=value, description=description, style=LABEL, layout=W.Layout(width=width)
    )


class Controls:
    """Device, run, hook kind, modifier, thresholds, fold depth, chart mode, compare and export
    controls.

    Example:
        >>> c = Controls(["cpu"], "cpu", "backward", "param", Thresholds(), [("auto", "auto")], "auto")
        >>> c.kind_box.value, c.compare_button.value
        ('backward', False)
    """

    def __init__(
        self,
        devices: list[str],
        device: str,
        hook_kind: str,
        chart_mode: str,
        thresholds: Thresholds,
        depth_options: list[tuple[str, Any]],
        depth: Any,
    ) -> None:
        self.device_box = _dropdown(devices, device, "device", "150px")
        self.run_button = _button(
            "Run", "forward + backward again", icon="play", button_style="primary"
        )
        self.kind_box = _dropdown(list(HOOK_KINDS), hook_kind, "click hooks", "190px")
        self.modifier_box = _dropdown(
            ["none", "clip_norm", "clip_value", "scale"], "none", "modifier", "170px"
        )
        self.modifier_value = _float(1.0, "value", "120px")
        self.apply_modifier = _button(
            "apply to selected", "apply the modifier to the selected node's module"
        )
        self.clear_button = _button("clear hooks", "remove every hook and modifier", "eraser")
        self.mode_box = W.ToggleButtons(
            options=[("per parameter", "param"), ("per module", "module")],
            value=chart_mode,
            description="chart",
            tooltips=["one bar per parameter", "one bar per module"],
            style={"button_width": "auto", "description_width": "initial"},
        )
        self.compare_button = W.ToggleButton(
            value=False,
            description="Compare",
            icon="columns",
            tooltip="pin this run as A; change something and Run: B is compared with A",
            layout=W.Layout(width="auto"),
        )
        self.vanishing_box = _float(thresholds.vanishing, "vanishing <", "190px")
        self.exploding_box = _float(thresholds.exploding, "exploding >", "190px")
        self.depth_box = _dropdown(depth_options, depth, "fold at", "130px")
        self.export_buttons = [
            _button(k, f"download the {what} as {k}", "download")
            for k, what in (("SVG", "graph"), ("CSV", "norms table"), ("JSON", "report"))
        ]
        # one row, whatever its text (long names end in an ellipsis): nothing below it moves
        self.loss_label = W.HTML(layout=W.Layout(height="22px", overflow="hidden", width="100%"))
        self.box = self._rows()

    def _rows(self) -> W.VBox:
        first = [self.device_box, self.run_button, self.kind_box, self.clear_button]
        first += [self.depth_box, self.mode_box, self.compare_button]
        second = [self.modifier_box, self.modifier_value, self.apply_modifier]
        second += [self.vanishing_box, self.exploding_box, *self.export_buttons]
        return W.VBox(
            [
                W.HBox(first, layout=W.Layout(**WRAP)),
                W.HBox(second, layout=W.Layout(**WRAP)),
                self.loss_label,
            ]
        )


class ToolbarWiring:
    """Builds the toolbar and ties each control to its action, every one through the guard.

    Needs from the widget: explorer, guard, depth, runs, _quiet and the actions it wires.
    """

    explorer: Any
    guard: Any
    depth: Any
    runs: int
    _quiet: bool
    _modifier_value: float
    controls: Controls
    toolbar: W.VBox
    _device_in_force: Callable[[], str]

    def _build_toolbar(self, hook_kind: str, chart_mode: str) -> None:
        ex = self.explorer
        w: Any = self  # the widget: its actions come from the other mixins
        current = self._device_in_force()
        devices = list(dict.fromkeys([current, *ex.available_devices()]))
        depth = "full" if self.depth is None else self.depth
        c = self.controls = Controls(
            devices, current, hook_kind, chart_mode, ex.thresholds, self._depth_options(), depth
        )
        g = self.guard.wrap
        c.run_button.on_click(g(lambda _: w.rerun()))
        c.clear_button.on_click(g(lambda _: w.clear_hooks()))
        c.apply_modifier.on_click(g(lambda _: w.apply_modifier_to_selected()))
        self._observe(c.device_box, lambda new: w.set_device(new))
        self._observe(c.mode_box, lambda new: w._update_chart())
        self._observe(c.vanishing_box, lambda new: w.set_thresholds())
        self._observe(c.exploding_box, lambda new: w.set_thresholds())
        self._observe(c.depth_box, w._set_depth)
        self._observe(c.kind_box, lambda new: w._update_readout())
        self._observe(c.compare_button, w._compare_toggled)
        for button, action in zip(
            c.export_buttons, (w.download_svg, w.download_csv, w.download_json)
        ):
            button.on_click(g(lambda _, act=action: act()))
        self._modifier_value = c.modifier_value.value
        self.toolbar = c.box

    def _observe(self, control: W.Widget, action: Callable[[Any], Any]) -> None:
        def changed(change: dict) -> None:
            if not self._quiet:
                self.guard.call(action, change["new"])

        control.observe(changed, "value")

    def _depth_options(self) -> list[tuple[str, Any]]:
        deepest = self.explorer.graph.max_depth if self.runs else 1
        return [("auto", "auto"), ("full", "full")] + [
            (str(d), d) for d in range(0, max(deepest, 1))
        ]
