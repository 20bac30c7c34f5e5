"""Hooks do not change the drawn graph: hook nodes are see-through, flow is what arrived."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import resnet18
from gradviz_widgets.hooks.clash import InplaceClash


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


def structure(ex):
    return {n.id for n in ex.graph.nodes}, {(e.src, e.dst) for e in ex.graph.edges}


class _AddInto(nn.Module):
    """`x += y` inside the model, on the output of a hooked submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.head = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 2)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x):
        h = self.a(x)
        h += self.b(x)
        return self.head(self.act(h))


class _WritesArg(nn.Module):
    """A module writing into its argument, without an `inplace` attribute."""

    def forward(self, x):
        x += 1.0
        return x


def _every_module(ex, model, kind):
    for path, _ in model.named_modules():
        if path:
            ex.set_hook(path, kind)


@pytest.mark.parametrize("make", ["resnet18", "add_into"])
@pytest.mark.parametrize("kind", ["backward", "forward", "forward_pre"])
def test_ids_and_structure_same_with_hooks_on_every_module(make, kind):
    torch.manual_seed(0)
    if make == "resnet18":
        model, x = resnet18(width=4), torch.randn(2, 3, 32, 32)
    else:
        model, x = _AddInto(), torch.randn(3, 4)
    ex = GradExplorer(model, x)
    ex.run()
    before = structure(ex)
    _every_module(ex, model, kind)
    ex.run()
    if kind == "backward":
        assert any("fallback" in m for m in ex.hook_mechanisms.values())
    assert structure(ex) == before


def test_clicking_inplace_relu_keeps_its_node():
    torch.manual_seed(0)
    ex = GradExplorer(resnet18(width=4), torch.randn(2, 3, 32, 32))
    ex.run()
    before = structure(ex)
    assert "relu/ReluBackward0#0" in before[0]
    assert ex.toggle_hook("relu") is True
    ex.run()
    assert "fallback" in ex.hook_mechanisms["relu"]
    assert structure(ex) == before
    assert any(e.target == "relu" for e in ex.events)
    assert ex.toggle_hook("relu") is False  # the same node unhooks it
    ex.run()
    assert structure(ex) == before


def test_module_writing_its_argument_is_learned():
    """Without an `inplace` attribute the first fallback run finds the write; later runs hook
    the argument directly and the ids are back."""
    model = nn.Sequential(nn.Linear(4, 4), _WritesArg(), nn.Linear(4, 2))
    ex = GradExplorer(model, torch.randn(3, 4))
    ex.run()
    before = structure(ex)
    ex.set_hook("1")
    # as if a clash had made every backward hook fall back (the explorer's learned facts)
    ex._learned = ex._learned.falling_back(["1"], InplaceClash())
    ex.run()
    assert "1" in ex.hook_record.facts.writes_args
    ex.run()
    assert structure(ex) == before
