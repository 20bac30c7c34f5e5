"""The explorer widget's toolbar controls (ipywidgets), created in one place; no behaviour.

Every input has a description (ipywidgets ties it to the input as its label: the accessible
name) or a visible text; descriptions are plain text (``description_allow_html`` stays off).
"""

from __future__ import annotations

from typing import Any

import ipywidgets as W

from .hook_config import HOOK_KINDS
from .stats import Thresholds


class Controls:
    """Device, run, hook kind, modifier, thresholds, fold depth, chart mode and export controls.

    Example:
        >>> c = Controls(["cpu"], "cpu", "backward", "param", Thresholds(), [("auto", "auto")], "auto")
        >>> c.kind_box.value
        'backward'
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
        # labels never cut: descriptions take the width their text needs ("initial"), buttons
        # size to their text ("auto") and each row wraps when the output is narrow
        label = {"description_width": "initial"}
        self.device_box = W.Dropdown(
            options=devices,
            value=device,
            description="device",
            style=label,
            layout=W.Layout(width="auto", min_width="150px"),
        )
        self.run_button = W.Button(
            description="Run",
            icon="play",
            button_style="primary",
            tooltip="forward + backward again",
            layout=W.Layout(width="auto"),
        )
        self.kind_box = W.Dropdown(
            options=list(HOOK_KINDS),
            value=hook_kind,
            description="click hooks",
            style=label,
            layout=W.Layout(width="auto", min_width="190px"),
        )
        self.modifier_box = W.Dropdown(
            options=["none", "clip_norm", "clip_value", "scale"],
            value="none",
            description="modifier",
            style=label,
            layout=W.Layout(width="auto", min_width="170px"),
        )
        self.modifier_value = W.FloatText(
            value=1.0, description="value", style=label, layout=W.Layout(width="120px")
        )
        self.apply_modifier = W.Button(
            description="apply to selected",
            tooltip="apply the modifier to the selected node's module",
            layout=W.Layout(width="auto"),
        )
        self.clear_button = W.Button(
            description="clear hooks",
            icon="eraser",
            tooltip="remove every hook and modifier",
            layout=W.Layout(width="auto"),
        )
        self.mode_box = W.ToggleButtons(
            options=[("per parameter", "param"), ("per module", "module")],
            value=chart_mode,
            description="chart",
            tooltips=["one bar per parameter", "one bar per module"],
            style={"button_width": "auto", "description_width": "initial"},
        )
        self.vanishing_box = W.FloatText(
            value=thresholds.vanishing,
            description="vanishing <",
            style=label,
            layout=W.Layout(width="190px"),
        )
        self.exploding_box = W.FloatText(
            value=thresholds.exploding,
            description="exploding >",
            style=label,
            layout=W.Layout(width="190px"),
        )
        self.depth_box = W.Dropdown(
            options=depth_options,
            value=depth,
            description="fold at",
            style=label,
            layout=W.Layout(width="auto", min_width="130px"),
        )
        self.export_buttons = [
            W.Button(
                description=k,
                icon="download",
                tooltip=f"download the {what} as {k}",
                layout=W.Layout(width="auto"),
            )
            for k, what in (("SVG", "graph"), ("CSV", "norms table"), ("JSON", "report"))
        ]
        # one row, whatever its text (long names end in an ellipsis): nothing below it moves
        self.loss_label = W.HTML(layout=W.Layout(height="22px", overflow="hidden", width="100%"))
        wrap = W.Layout(flex_flow="row wrap", align_items="center", width="100%")
        self.box = W.VBox(
            [
                W.HBox(
                    [
                        self.device_box,
                        self.run_button,
                        self.kind_box,
                        self.clear_button,
                        self.depth_box,
                        self.mode_box,
                    ],
                    layout=wrap,
                ),
                W.HBox(
                    [
                        self.modifier_box,
                        self.modifier_value,
                        self.apply_modifier,
                        self.vanishing_box,
                        self.exploding_box,
                        *self.export_buttons,
                    ],
                    layout=W.Layout(flex_flow="row wrap", align_items="center", width="100%"),
                ),
                self.loss_label,
            ]
        )
