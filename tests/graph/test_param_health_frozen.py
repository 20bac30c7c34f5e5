"""A folded module's box says when some of its parameters get no gradient (a frozen weight
beside a trainable bias read as a healthy box), and never lets that hide a worse status."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.graph.ghosts import add_ghosts
from gradviz_widgets.graph.nodes import GradNode
from gradviz_widgets.graph.view import param_health


def test_a_partly_frozen_module_says_so_folded() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4))
    net[0].weight.requires_grad_(False)  # its bias still trains
    ex = GradExplorer(net, torch.randn(3, 4))
    report = ex.run()
    assert report.param_status == {
        "0.weight": "none",
        "0.bias": "healthy",
        "2.weight": "healthy",
        "2.bias": "healthy",
    }
    assert report.findings[0].startswith("1 parameter gets no gradient: 0.weight")
    view = add_ghosts(ex.graph, report.none_reasons).view(depth=0)
    box = next(n for n in view.nodes if n.id == "module:0")
    assert (box.param_status, box.param_text) == ("none", "1 of 2 params: no gradient (frozen)")
    other = next(n for n in view.nodes if n.id == "module:2")
    assert (other.param_status, other.param_text) == ("healthy", "")
    ex.close()


def test_frozen_parameters_never_hide_a_worse_one() -> None:
    """LoRA: frozen base weights beside a vanishing adapter: the box says vanishing."""
    ghost = GradNode("ghost:param:base", "Ghost", "ghost", "m", "base\n✂ frozen", status="none")
    lora = dataclasses.replace(ghost, id="param:lora", kind="param", status="vanishing")
    assert param_health([ghost, lora]) == ("vanishing", "1 of 2 params: vanishing")
