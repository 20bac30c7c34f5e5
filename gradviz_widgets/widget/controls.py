"""The explorer widget's toolbar, a part of ExplorerWidget: its controls (ipywidgets, created in
one place), each tied to an action through the widget's guard, and what a control shows when
Python sets it (no action then).

Every input has a description (ipywidgets ties it to the input as its label: the accessible
name) or a visible text; descriptions are plain text (``description_allow_html`` stays off).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as W

from ..hooks.config import HOOK_KINDS
from ..vocabulary import Thresholds
from .controller import ActionGuard

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


class Toolbar:
    """Device, run, hook kind, modifier, thresholds, fold depth, chart mode, compare and export
    controls. Owns the controls, the quiet flag (set while Python writes a control's value: its
    observer does nothing) and the modifier value in force (a rejected value reverts to it).

    Example:
        >>> guard = ActionGuard(print)
        >>> c = Toolbar(guard, ["cpu"], "cpu", "backward", "param", Thresholds(), [("auto", "auto")], "auto")
        >>> c.kind, c.compare_button.value
        ('backward', False)
    """

    def __init__(
        self,
        guard: ActionGuard,
        devices: list[str],
        device: str,
        hook_kind: str,
        chart_mode: str,
        thresholds: Thresholds,
        depth_options: list[tuple[str, Any]],
        depth: Any,
    ) -> None:
        self._guard = guard
        self._quiet = False
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
            # one row: the label beside its buttons (the widget's own box is a block, which
            # put "chart" on a line of its own above them)
            layout=W.Layout(display="flex", flex_flow="row nowrap", align_items="center"),
        )
        self.mode_box.add_class("gv-chart-mode")
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
        self.modifier_in_force: float = self.modifier_value.value

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

    @property
    def kind(self) -> str:
        """The hook kind a graph click puts on."""
        return str(self.kind_box.value)

    @property
    def mode(self) -> str:
        """The chart's mode: "param" or "module"."""
        return str(self.mode_box.value)

    def on_click(self, button: W.Button, action: Callable[[], Any]) -> None:
        """Run `action` on each click of `button`, through the guard."""
        button.on_click(self._guard.wrap(lambda _: action()))

    def on_change(self, control: W.Widget, action: Callable[[Any], Any]) -> None:
        """Run `action(new value)` when the user changes `control`, through the guard (not when
        Python sets it quietly)."""

        def changed(change: dict) -> None:
            if not self._quiet:
                self._guard.call(action, change["new"])

        control.observe(changed, "value")

    def set_quietly(self, control: W.Widget, value: Any) -> None:
        """Show `value` in `control` without acting on it (a rejected input reverting)."""
        self._quiet = True
        try:
            control.value = value
        finally:
            self._quiet = False

    def show_settings(self, device: str, thresholds: Thresholds) -> None:
        """Show the settings in force (after a rejected input, an undone change, a change from
        code)."""
        if device not in self.device_box.options:
            self.set_quietly(self.device_box, None)
            self.device_box.options = [device, *self.device_box.options]
        self.set_quietly(self.device_box, device)
        self.set_quietly(self.vanishing_box, thresholds.vanishing)
        self.set_quietly(self.exploding_box, thresholds.exploding)


def depth_options(deepest: int) -> list[tuple[str, Any]]:
    """The fold menu for a graph `deepest` module levels deep.

    Example:
        >>> depth_options(2)
        [('auto', 'auto'), ('full', 'full'), ('0', 0), ('1', 1)]
    """
    return [("auto", "auto"), ("full", "full")] + [(str(d), d) for d in range(max(deepest, 1))]
