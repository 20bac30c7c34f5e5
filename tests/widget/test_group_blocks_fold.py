"""Double-clicks inside an unfolded ×N group (an outside try-out's findings): a folded block
drawn inside the unfolded group opened nothing and folded the whole group back instead; folding
the group back while one of its blocks was open drew a group "×23" labelled 0–23 beside that
block's nodes, with edges in a cycle through the group."""

from __future__ import annotations

import torch
from torch import nn

from gradviz_widgets import GradExplorer


class Blocks(nn.Module):
    def __init__(self, n: int = 40) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 6)) for _ in range(n)
        )
        self.head = nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:  # ops of the root between blocks: a view of 200 nodes
            x = ((x + block(x)).tanh() * 0.5) - 0.1
        return self.head(x)


def _widget() -> tuple[GradExplorer, object]:
    torch.manual_seed(0)
    ex = GradExplorer(Blocks(), torch.randn(3, 6))
    return ex, ex.show(depth=0)


def _modules(w) -> set[str]:
    return {n.module for n in w.view.nodes}


def test_a_folded_block_in_an_unfolded_group_opens() -> None:
    ex, w = _widget()
    group = next(n.id for n in w.view.nodes if n.id.startswith("group:blocks"))
    w.reveal_name("blocks.17.0.weight")  # the search box's Enter: the group unfolds
    assert group in w.expand and any(n.module == "blocks.3" for n in w.view.nodes)
    w.toggle_scope("blocks.3")  # the folded block's double-click
    assert group in w.expand, "the group stayed unfolded"
    assert any(m.startswith("blocks.3.") for m in _modules(w)), "blocks.3 opened"


def test_folding_the_group_back_folds_its_open_blocks_too() -> None:
    ex, w = _widget()
    w.reveal_name("blocks.3.0.weight")
    assert any(m.startswith("blocks.3.") for m in _modules(w))
    w.toggle_scope("blocks")  # the frame around the unfolded blocks
    assert not any(m.startswith("blocks.") and m != "blocks" for m in _modules(w))
    groups = [n for n in w.view.nodes if n.id.startswith("group:blocks")]
    assert len(groups) == 1 and "×40" in groups[0].label
    assert not any(e.src == e.dst for e in w.view.edges)
    assert not w.expand
