"""A folded module that holds nothing but parameters the gradient never reached (a frozen stage
at fold depth 1) is no finding to open the view on, as a ghost parameter is not: the page
opened a hand-chosen fold depth of a ResNet with frozen stages on those boxes ("no gradient
(frozen)"), the gradient's path off the pane. Its node info says `ghost` now."""

from __future__ import annotations

import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.graph.ghosts import add_ghosts
from gradviz_widgets.render.dot import node_info


def _block(c: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU())


def test_frozen_stages_folded_are_ghosts_and_live_ones_are_not():
    torch.manual_seed(0)
    net = nn.Sequential()
    net.add_module("stem", _block(3))
    net.add_module("layer1", nn.Sequential(_block(3), _block(3)))
    net.add_module("layer2", nn.Sequential(_block(3), _block(3)))
    net.add_module("head", nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 4)))
    for m in (net.stem, net.layer1):
        m.requires_grad_(False)
    ex = GradExplorer(net, torch.randn(2, 3, 8, 8))
    ex.run()
    graph = add_ghosts(ex.graph, ex.report.none_reasons)
    for depth in (0, 1):
        info = {n.id: node_info(n) for n in graph.view(depth=depth).nodes}
        ghosts = {i for i, v in info.items() if v["ghost"]}
        frozen = {i for i in info if i.startswith(("module:stem", "module:layer1"))}
        assert frozen and ghosts == frozen, (depth, ghosts)
    ex.close()
