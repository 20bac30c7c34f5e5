"""The model's input belongs to the root, whichever module reads it first: it had taken the
scope of the first module call that used it (its AccumulateGrad node is made there), so a
folded view hid it inside that module, drew an edge from that module to every other reader
of the input (a -> b, where a feeds nothing to b) and counted the input's whole gradient, b's
part too, as what a passed on (an outside tester's check against float64)."""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from gradviz_widgets import GradExplorer


class Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (torch.tanh(self.a(x)) * self.b(x)).sum()


def _parts(net: Two, x: torch.Tensor) -> dict[str, float]:
    """What a and b each passed back to the input, and its whole gradient, in float64."""
    ref = copy.deepcopy(net).double()
    x = x.detach().double().requires_grad_(True)
    ya, yb = ref.a(x), ref.b(x)
    (ga, gb) = torch.autograd.grad((torch.tanh(ya) * yb).sum(), (ya, yb))
    (to_a,) = torch.autograd.grad(ya, x, ga)
    (to_b,) = torch.autograd.grad(yb, x, gb)
    return {"a": to_a.norm().item(), "b": to_b.norm().item(), "x": (to_a + to_b).norm().item()}


def test_an_input_read_by_two_modules_stays_outside_both() -> None:
    torch.manual_seed(0)
    net, x = Two(), torch.randn(3, 4, requires_grad=True)
    ex = GradExplorer(net, x)
    ex.run()
    true = _parts(net, x)
    assert math.isclose(ex.graph.node("input:0").grad_norm, true["x"], rel_tol=1e-5)
    view = ex.graph.view(depth=0)
    assert "input:0" in view.by_id and "acc:input:0" in view.by_id
    for box in ("module:a", "module:b"):
        assert not {"input:0", "acc:input:0"} & set(view.node(box).members)
    edges = {(e.src, e.dst): e.grad_norm for e in view.edges}
    assert ("module:a", "module:b") not in edges
    assert math.isclose(edges[("acc:input:0", "module:a")], true["a"], rel_tol=1e-5)
    assert math.isclose(edges[("acc:input:0", "module:b")], true["b"], rel_tol=1e-5)
    ex.close()


def test_an_input_has_the_root_scope() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    ex = GradExplorer(net, torch.randn(2, 4, requires_grad=True))
    ex.run()
    for node_id in ("input:0", "acc:input:0"):
        node = ex.graph.node(node_id)
        assert (node.scope, node.module) == ((), "")
    assert "input:0" in ex.graph.view(depth=0).by_id
    ex.close()
