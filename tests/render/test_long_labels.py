"""A long module name is elided in the middle where it is drawn, whole where it is read.

From outside: a 190-character module name drew a node wider than the pane, text cut on both
sides; unfolded, its three children all showed the same middle stretch of the name; and the
offline page opened on an empty stretch of the 4,000 px wide graph.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.render.dot import LABEL_CHARS, node_info, render_dot

LONG = "encoder_" + "very_long_module_name_" * 8 + "end"


def _explorer() -> GradExplorer:
    torch.manual_seed(0)
    net = nn.Sequential()
    net.add_module(LONG, nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)))
    return GradExplorer(net, torch.randn(3, 4))


def _labels(dot: str) -> list[str]:
    return [
        line
        for label in re.findall(r'label="((?:[^"\\]|\\.)*)"', dot)
        for line in label.split("\\n")
    ]


def test_drawn_labels_are_elided_and_the_tooltip_keeps_the_name() -> None:
    ex = _explorer()
    ex.run()
    for depth in (0, 1, None):
        view = ex.graph if depth is None else ex.graph.view(depth)
        lines = _labels(render_dot(view).dot)
        assert lines and max(len(line) for line in lines) <= LABEL_CHARS
        assert any("…" in line for line in lines)
    lines = _labels(render_dot(ex.graph.view(1)).dot)  # the children folded: each reads as itself
    for child in ("end.0 · Linear · 4 nodes", "end.1 · ReLU · 1 node", "end.2 · Linear · 4 nodes"):
        assert any("…" in line and line.endswith(child) for line in lines), (child, lines)
    info = node_info(next(n for n in ex.graph.nodes if n.kind == "param"))
    assert info["label"].startswith(f"{LONG}.0.")  # whole where it is read
