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
# their text ("auto"); a row wraps between groups first (a group wraps inside only when it is
# wider than the output)
LABEL = {"description_width": "initial"}
WRAP = {"flex_flow": "row wrap", "align_items": "center", "width": "100%"}
GROUP = {"flex_flow": "row wrap", "align_items": "center", "max_width": "100%"}
#: what the "more" toggle shows and hides (also its tooltip)
MORE = "gradient modifier, vanishing / exploding thresholds and downloads"


def _dropdown(options: list, value: Any, description: str) -> W.Dropdown:
    # no tooltip: ipywidgets 8 draws a menu's only when it has no description
    return W.Dropdown(
        options=options,
        value=value,
        description=description,
        style=LABEL,
        layout=W.Layout(width="auto"),
    )


def _button(description: str, tooltip: str, icon: str = "", **kw: Any) -> W.Button:
    return W.Button(
        description=description, icon=icon, tooltip=tooltip, layout=W.Layout(width="auto"), **kw
    )


def _float(value: float, description: str, tooltip: str, width: str) -> W.FloatText:
    return W.FloatText(
        value=value,
        description=description,
        tooltip=tooltip,
        style=LABEL,
        layout=W.Layout(width=width),
    )


def _group(children: list[W.Widget]) -> W.HBox:
    """Controls that belong together: the row wraps between groups, not inside one."""
    box = W.HBox(children, layout=W.Layout(**GROUP))
    box.add_class("gv-group")
    return box


class Toolbar:
    """Device, run, hook kind, modifier, thresholds, fold depth, chart mode, compare and export
    controls. Owns the controls, the quiet flag (set while Python writes a control's value: its
    observer does nothing) and the modifier value in force (a rejected value reverts to it).

    The controls used on every look (Run, device, click hooks, clear hooks, fold at, chart,
    Compare) are one wrapping row of groups (two rows at 1280 px, one at 1920); the rarely used
    ones (modifier, thresholds, downloads) join the row after the "more" toggle when it is on
    (the class ``gv-more-open`` on the toolbar; the graph pane's stylesheet hides them without
    it). Where that stylesheet is not on the page (the marimo mirror draws the controls itself)
    every control shows and the toggle does not.

    Example:
        >>> guard = ActionGuard(print)
        >>> c = Toolbar(guard, ["cpu"], "cpu", "backward", "param", Thresholds(), [("auto", "auto")], "auto")
        >>> c.kind, c.compare_button.value, c.more_button.value
        ('backward', False, False)
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
        self.run_button = _button(
            "Run", "forward + backward again", icon="play", button_style="primary"
        )
        self.device_box = _dropdown(devices, device, "device")
        self.kind_box = _dropdown(list(HOOK_KINDS), hook_kind, "click hooks")
        self.clear_button = _button("clear hooks", "remove every hook and modifier", "eraser")
        self.depth_box = _dropdown(depth_options, depth, "fold at")
        self.mode_box = _chart_mode(chart_mode)
        self.compare_button = W.ToggleButton(
            value=False,
            description="Compare",
            icon="columns",
            tooltip="pin this run as A; change something and Run: B is compared with A",
            layout=W.Layout(width="auto"),
        )
        self._secondary(thresholds)
        # one row, whatever its text (long names end in an ellipsis): nothing below it moves
        self.loss_label = W.HTML(layout=W.Layout(height="22px", overflow="hidden", width="auto"))
        self.box = self._rows()
        self.modifier_in_force: float = self.modifier_value.value

    def _secondary(self, thresholds: Thresholds) -> None:
        """The controls behind the "more" toggle, and the toggle."""
        self.modifier_box = _dropdown(
            ["none", "clip_norm", "clip_value", "scale"], "none", "modifier"
        )
        self.modifier_value = _float(
            1.0, "value", "clip_norm: the largest norm; clip_value: the largest |g|; "
            "scale: the factor", "104px",
        )  # fmt: skip
        self.apply_modifier = _button(
            "apply to selected", "apply the modifier to the selected node's module"
        )
        self.vanishing_box = _float(
            thresholds.vanishing, "vanishing <", "a gradient norm below this is vanishing",
            "156px",
        )  # fmt: skip
        self.exploding_box = _float(
            thresholds.exploding, "exploding >", "a gradient norm above this is exploding",
            "156px",
        )  # fmt: skip
        self.export_buttons = [
            _button(k, f"download the {what} as {k}", "download")
            for k, what in (("SVG", "graph"), ("CSV", "norms table"), ("JSON", "report"))
        ]
        # hidden by its layout; the graph pane's stylesheet shows it (and hides what it opens),
        # so where that sheet is not (the marimo mirror) every control shows and no toggle
        self.more_button = W.ToggleButton(
            value=False,
            description="more",
            icon="chevron-right",
            tooltip=f"show or hide the {MORE}",
            layout=W.Layout(width="auto", display="none"),
        )
        self.more_button.add_class("gv-more-toggle")
        self.more_button.observe(lambda change: self._more_toggled(change["new"]), "value")

    def _rows(self) -> W.VBox:
        """One wrapping row of groups; the "more" groups follow the toggle in the same row
        (the stylesheet lays their box out as if it were not there: ``display: contents``)."""
        more = [
            _group([self.modifier_box, self.modifier_value, self.apply_modifier]),
            _group([self.vanishing_box, self.exploding_box]),
            _group(list(self.export_buttons)),
        ]
        self.more_box = W.HBox(more, layout=W.Layout(**WRAP))
        self.more_box.add_class("gv-more")
        row = [
            _group([self.run_button, self.device_box]),
            _group([self.kind_box, self.clear_button]),
            _group([self.depth_box]),
            _group([self.mode_box]),
            _group([self.compare_button, self.more_button]),
            self.more_box,
        ]
        main = W.HBox(row, layout=W.Layout(**WRAP))
        main.add_class("gv-toolbar-row")
        box = W.VBox([main, self.loss_label])
        box.add_class("gv-toolbar")
        return box

    def show_more(self, show: bool = True) -> None:
        """Show (or hide) the controls behind "more": modifier, thresholds, downloads."""
        self.more_button.value = show

    def _more_toggled(self, show: bool) -> None:
        self.more_button.icon = "chevron-left" if show else "chevron-right"
        if show:
            self.box.add_class("gv-more-open")
        else:
            self.box.remove_class("gv-more-open")

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


def _chart_mode(chart_mode: str) -> W.ToggleButtons:
    """The chart's mode: one bar per parameter or per module."""
    box = W.ToggleButtons(
        options=[("per parameter", "param"), ("per module", "module")],
        value=chart_mode,
        description="chart",
        tooltips=["one bar per parameter", "one bar per module"],
        style={"button_width": "auto", "description_width": "initial"},
        # one row: the label beside its buttons (the widget's own box is a block, which put
        # "chart" on a line of its own above them)
        layout=W.Layout(display="flex", flex_flow="row nowrap", align_items="center"),
    )
    box.add_class("gv-chart-mode")
    return box
