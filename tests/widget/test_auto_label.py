"""The loss line names the fold that reproduces the view: the auto fold also folds leaf modules
into boxes once the graph did not fit (first_view.fold_leaves), which "fold at" a depth by hand
does not, so the line says so (an outside tester chose the depth it named and saw 80 nodes of
86 where the auto view showed 46)."""

from __future__ import annotations

import re
from typing import Any

import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.widget.explorer_widget import ExplorerWidget


def page(w: ExplorerWidget, msg: dict[str, Any]) -> None:
    """A message from the page, as the pane's comm delivers it."""
    w.pane._on_frontend_msg(w.pane, msg, [])


def too_big(w: ExplorerWidget, width: int, cell: int, height: int = 520) -> None:
    """The page's report that the graph drawn now did not fit."""
    page(w, {"kind": "fit", "revision": w.pane.revision, "fits": False, "width": width,
             "height": height, "cell": cell})  # fmt: skip


def deep_mlp() -> ExplorerWidget:
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(4, 4), nn.Tanh()) for _ in range(30)]
    ex = GradExplorer(nn.Sequential(nn.Sequential(*blocks), nn.Linear(4, 1)), torch.randn(3, 4))
    return ex.show()


def shown(w: ExplorerWidget) -> int:
    found = re.search(r"(\d+) of \d+ nodes shown", w.controls.loss_label.value)
    assert found, w.controls.loss_label.value
    return int(found.group(1))


def test_the_auto_fold_says_leaf_modules_are_folded_too() -> None:
    w = deep_mlp()
    page(w, {"kind": "resize", "cell": 848})
    too_big(w, 848, 848)  # the first step: leaf modules become boxes
    assert w.first_view.fold_leaves
    depth = w.first_view.shown
    label = w.controls.loss_label.value
    assert f"(auto: folded at depth {depth}, leaf modules as boxes)" in label, label
    auto_nodes = shown(w)
    # the depth it names, chosen by hand, shows more nodes: the line says it is not all
    w.controls.depth_box.value = depth
    label = w.controls.loss_label.value
    assert f"(folded at depth {depth})" in label and "leaf" not in label and "auto" not in label
    assert shown(w) > auto_nodes


def test_the_auto_fold_before_any_leaf_folding_names_its_depth_alone() -> None:
    w = deep_mlp()
    label = w.controls.loss_label.value
    assert not w.first_view.fold_leaves and "leaf modules" not in label
    if w.first_view.shown is not None:
        assert f"(auto: folded at depth {w.first_view.shown})" in label


def test_a_module_unfolded_by_hand_is_said() -> None:
    """From outside: after unfolding a folded group by double-click, the line still said
    "(folded at depth 0)" over a view with every layer drawn."""
    w = deep_mlp()
    w._set_depth(0)
    folded = next(n.module for n in w.view.nodes if n.kind == "module")
    w.toggle_scope(folded)
    assert "(folded at depth 0, 1 unfolded by hand)" in w.controls.loss_label.value
    w.toggle_scope(folded)
    assert "(folded at depth 0)" in w.controls.loss_label.value
    w._set_depth("full")
    w.toggle_scope(folded)  # drawn open at full depth: folded by hand
    assert "(1 folded by hand)" in w.controls.loss_label.value
