"""×N overview: runs of identical blocks fold into one group node; unfolding restores them."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import gpt2_like


def drawn(view) -> int:
    return sum(n.kind != "accumulate" for n in view.nodes)


@pytest.fixture(scope="module")
def gpt2():
    torch.manual_seed(0)
    ex = GradExplorer(
        gpt2_like(n_layer=12, d_model=16, n_head=2, vocab=64, seq=8), torch.randint(0, 64, (2, 8))
    )
    ex.run()
    return ex.graph


def test_gpt2_blocks_fold_into_one_group(gpt2):
    view = gpt2.view(0, group=True)
    group = view.node("group:h.0-11")
    assert group.label.startswith("h.0–11 ×12")
    assert not any(n.id.startswith("module:h.") for n in view.nodes)
    assert "param:h.5.attn.c_attn.weight" in group.members


def test_unfolding_the_group_restores_the_blocks(gpt2):
    plain = gpt2.view(0, group=False)
    opened = gpt2.view(0, expand={"group:h.0-11"}, group=True)
    assert {n.id for n in opened.nodes} == {n.id for n in plain.nodes}
    assert {(e.src, e.dst) for e in opened.edges} == {(e.src, e.dst) for e in plain.edges}
    again = gpt2.view(0, group=True)
    assert {n.id for n in again.nodes} == {n.id for n in gpt2.view(0, group=True).nodes}


def test_thousand_layer_chain_default_view_is_small():
    torch.manual_seed(0)
    layers = []
    for _ in range(1000):
        layers += [nn.Linear(4, 4), nn.Tanh()]
    ex = GradExplorer(nn.Sequential(*layers), torch.randn(2, 4))
    ex.run()
    g = ex.graph
    view = g.view(g.auto_depth(120))
    assert drawn(view) <= 50
    assert any(n.id.startswith("group:") and "×1000" in n.label for n in view.nodes)
