"""Hooks do not change the drawn graph: hook nodes are see-through, flow is what arrived."""

from __future__ import annotations

import pytest
import torch

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import resnet18


def snapshot(ex):
    return ({n.id for n in ex.graph.nodes}, {(e.src, e.dst): e.grad_norm for e in ex.graph.edges})


def test_full_backward_hooks_leave_graph_and_flow_unchanged(dead_explorer):
    nodes, edges = snapshot(dead_explorer)
    dead_explorer.toggle_hook("gate")
    dead_explorer.toggle_hook("main2")
    dead_explorer.run()
    assert not any("BackwardHookFunction" in n.op for n in dead_explorer.graph.nodes)
    assert snapshot(dead_explorer) == (nodes, edges)


def test_modifier_shows_on_the_edge_it_changed(dead_explorer):
    _, before = snapshot(dead_explorer)
    dead_explorer.set_modifier("main2", scale=0.5)
    dead_explorer.run()
    _, after = snapshot(dead_explorer)
    into_main2 = ("ReluBackward0#0", "main2/AddmmBackward0#0")
    assert after[into_main2] == pytest.approx(before[into_main2] / 2)
    # main2's own weight gradient comes from its grad_output, which the modifier leaves alone
    weight = ("main2/TBackward0#0", "main2/AddmmBackward0#0")
    assert after[weight] == before[weight]


def test_fallback_hooks_leave_graph_unchanged():
    torch.manual_seed(0)
    ex = GradExplorer(resnet18(width=8), torch.randn(2, 3, 32, 32))
    nodes, edges = snapshot(ex)
    ex.toggle_hook("layer1.0.bn1")
    ex.toggle_hook("layer1.0")
    ex.run()
    assert "fallback" in ex.hook_mechanisms["layer1.0.bn1"]
    after_nodes, after_edges = snapshot(ex)
    assert after_nodes == nodes
    assert after_edges.keys() == edges.keys()
    assert all(after_edges[k] == pytest.approx(v) for k, v in edges.items() if v is not None)
