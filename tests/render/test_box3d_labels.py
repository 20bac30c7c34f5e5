"""A folded module's label of three lines stays inside the front face of its box3d (a ×600
group's first line sat on the face's top edge: Graphviz centres the label in the whole box,
the face starts the 3D depth lower), and a group names every module type of its block."""

from __future__ import annotations

import re
import shutil

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.render import svg_with_dot, to_dot


def _mlp(blocks: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(blocks):
        layers += [nn.Linear(8, 8), nn.Tanh()]
    return nn.Sequential(*layers)


def test_a_group_names_every_type_of_its_block() -> None:
    torch.manual_seed(0)
    ex = GradExplorer(_mlp(40), torch.randn(2, 8))
    ex.run()
    (group,) = [n for n in ex.graph.view(depth=0, group=True).nodes if n.id.startswith("group:")]
    assert "×40" in group.label and "(Linear, Tanh)" in group.label, group.label


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot not installed")
def test_three_lines_stay_inside_the_front_face() -> None:
    torch.manual_seed(0)
    ex = GradExplorer(_mlp(600), torch.randn(2, 8))
    ex.run()
    svg = svg_with_dot(to_dot(ex.graph.view(depth=0)))
    for node in re.findall(r'<g id="n\d+" class="node">.*?</g>', svg, flags=re.S):
        faces = re.findall(r'<polyline[^>]*points="[\d.]+,(-?[\d.]+) [\d.]+,(-?[\d.]+) ?"', node)
        texts = [float(y) for y in re.findall(r'<text[^>]* y="(-?[\d.]+)"', node)]
        flat = [float(a) for a, b in faces if a == b]  # the front face's top edge
        if len(texts) >= 3 and flat:
            # the first baseline at least a 10 pt line below the edge (cap height ~7 pt)
            assert texts[0] - flat[0] >= 10, (texts[0], flat[0], node[:200])
            break
    else:
        pytest.fail("no folded module of three lines drawn")
