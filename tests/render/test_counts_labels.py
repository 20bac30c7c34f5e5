"""What a folded node's label, tooltip and the offline page say: node counts of drawn nodes,
and a module's ‖g‖ as measured (its inflow), whatever status its boundary gives it."""

from __future__ import annotations

import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.graph.nodes import GradNode, drawn_count
from gradviz_widgets.render.dot import label_lines, node_info
from gradviz_widgets.render.page import views


def _module(node_id: str, label: str) -> GradNode:
    # nothing leaves it (exactly 0.0), while 2.5 reached it from the loss side
    return GradNode(node_id, "Block", "module", "h", label, grad_norm=2.5, status="zero")


def test_a_zero_module_shows_the_norm_that_reached_it() -> None:
    node = _module("module:h", "h\nBlock · 3 nodes")
    assert label_lines(node)[-1] == "‖g‖ 2.5"
    info = node_info(node, hooked=False)
    assert info["norm_text"] == "2.5" and info["status_text"] == "gradient exactly zero"


def test_a_group_tells_its_inflow_from_its_blocks_range() -> None:
    node = _module("group:h.0-2", "h.0–2 ×3\n(Block) · ‖g‖ per block 0.0–2.5")
    lines = label_lines(node)
    assert lines[-1] == "‖g‖ into group 2.5"
    assert node_info(node, hooked=False)["norm_text"] == "2.5"


def test_the_page_counts_drawn_nodes() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Sequential(nn.Linear(6, 3), nn.ReLU()))
    ex = GradExplorer(net, torch.randn(3, 4), loss_fn=nn.MSELoss(), target=torch.zeros(3, 3))
    ex.run()
    graph, pages = ex.graph, views(ex.graph)
    for view in pages:
        folded = [n for n in view["nodes"].values() if n["kind"] == "module"]
        for info in folded:
            (node,) = [n for n in graph.view(view["depth"]).nodes if n.module == info["expandable"]]
            count = drawn_count(graph.by_id[m] for m in node.members)
            assert f" · {count} node" in info["label"], info["label"]
    (full,) = [v for v in pages if v["depth"] is None]
    assert full["drawn"] == drawn_count(graph.nodes)
    ex.close()
