"""A folded module's ‖g‖ and the edges between folded groups are the norms of what flowed,
against plain backward: a tensor used by several consumers gets the sum of their pieces,
whose norm is not their norms in quadrature (an outside tester's repros: an output read
twice with nearly cancelling pieces printed 9.80 for a true 0.00346; a module called twice
printed 2.021 for its parameters' 2.079)."""

from __future__ import annotations

import math

import torch
from torch import nn

from gradviz_widgets import GradExplorer


class Cancel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blk = nn.Sequential(nn.Linear(4, 4), nn.Tanh())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.blk(x)
        return (h * 2).sum() - (h * 2.001).sum()  # d loss / d h = -0.001 everywhere


class Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blk, self.out = nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.blk(torch.tanh(self.blk(x))))).sum()


def test_an_output_read_twice_shows_the_sum_of_its_pieces() -> None:
    torch.manual_seed(0)
    net, x = Cancel(), torch.randn(3, 4)
    ex = GradExplorer(net, x)
    ex.run()
    h = net.blk(x)
    h.retain_grad()
    ((h * 2).sum() - (h * 2.001).sum()).backward()
    true = h.grad.double().norm().item()
    box = ex.graph.view(depth=0).node("module:blk")
    assert math.isclose(box.grad_norm, true, rel_tol=1e-6)
    assert box.status == "healthy" and box.grad_norm < 0.01
    ex.close()


def test_a_module_called_twice_shows_its_parameters_whole() -> None:
    torch.manual_seed(0)
    net, x = Twice(), torch.randn(3, 4)
    ex = GradExplorer(net, x)
    report = ex.run()
    net(x).backward()
    true = math.hypot(net.blk.weight.grad.double().norm(), net.blk.bias.grad.double().norm())
    params = ex.graph.view(depth=0).node("module:blk@params")
    assert math.isclose(params.grad_norm, true, rel_tol=1e-6)
    assert math.isclose(report.module_norms["blk"], true, rel_tol=1e-6)
    ex.close()


class TiedHead(nn.Module):
    """An embedding whose weight is also the output projection (GPT-2's wte and lm_head)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return (torch.tanh(self.emb(ids)) @ self.emb.weight.t()).sum()


def test_a_tied_weight_used_outside_is_not_its_modules_output() -> None:
    """The folded embedding printed the head's gradient into the tied weight together with its
    output's (GPT-2: 1.84 for a true 1.05; Whisper's decoder 1.12 for 0.023)."""
    torch.manual_seed(0)
    net, ids = TiedHead(), torch.tensor([[1, 2, 3, 2]])
    ex = GradExplorer(net, ids)
    ex.run()
    h = net.emb(ids)
    h.retain_grad()
    (torch.tanh(h) @ net.emb.weight.t()).sum().backward()
    box = ex.graph.view(depth=0).node("module:emb")
    assert math.isclose(box.grad_norm, h.grad.double().norm().item(), rel_tol=1e-6)
    ex.close()
