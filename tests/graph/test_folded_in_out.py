"""A folded module is coloured by what it passes on (to its inputs and parameters) and prints
what entered it from the loss side: where the two differ in status, the box printed an
exploding inflow in a healthy colour (a module scaling its output by 1e-5), so its label and
tooltip now print both, and which one the colour is."""

from __future__ import annotations

import math

import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.render.dot import label_lines, node_info
from gradviz_widgets.vocabulary import combine_norms


class Shrink(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * 1e-5


def test_a_box_whose_colour_is_not_its_inflows_prints_both() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), Shrink(), nn.Linear(4, 1))
    with torch.no_grad():
        net[2].weight.mul_(1e6)
    x = torch.randn(3, 4)
    ex = GradExplorer(net, x)
    report = ex.run()
    boxes = {n.id: n for n in ex.graph.view(depth=0).nodes if n.kind == "module"}
    shrink, head, first = boxes["module:1"], boxes["module:2"], boxes["module:0"]
    # what entered Shrink: d loss / d (its output), exploding; it passes on ~1e-5 of it
    h = net[0](x).detach().requires_grad_(True)
    out = net[1](h)
    g_out, g_in = torch.autograd.grad(net[2](out).sum(), (out, h))
    assert math.isclose(shrink.grad_norm, g_out.double().norm().item(), rel_tol=1e-6)
    passed = combine_norms([report.param_norms["1.lin.weight"], report.param_norms["1.lin.bias"]])
    assert shrink.status == "healthy" and shrink.grad_out is not None
    assert math.isclose(
        shrink.grad_out, combine_norms([g_in.double().norm().item(), passed]), rel_tol=1e-6
    )
    info = node_info(shrink)
    assert label_lines(shrink)[-1] == f"‖g‖ {info['norm_text']}"
    assert info["norm_text"].startswith("in 9.") and " · out " in info["norm_text"]
    assert info["status_text"] == "healthy (what it passed to its inputs and parameters)"
    # the head: a healthy inflow (d loss / d out = 1), an exploding gradient passed on
    assert head.status == "exploding" and head.grad_out is not None
    assert node_info(head)["norm_text"].startswith("in 1.732 · out ")
    # agreeing statuses print one number, as before
    assert first.grad_out is None and " · out " not in label_lines(first)[-1]
    ex.close()
