"""A folded module with a full backward hook (the user's, or a modifier the explorer puts
there) that reads its input in several ops shows, on its edge from that input, what it passed
back after the hook: `ex.set_modifier("att", scale=0.5)` on an attention whose q and k read
the input, the input read by a residual outside too, left the folded edge at the unscaled sum
of q's and k's pieces (2x what reached the input from the attention), while an input read once
showed the scaled gradient (an outside tester's check against float64)."""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from gradviz_widgets import GradExplorer


class Att(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(5, 5), nn.Linear(5, 5)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.q(h)) * self.k(h)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp, self.att, self.out = nn.Linear(4, 5), Att(), nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        return self.out(self.att(h) + h)  # h read inside `att` twice and by the residual


def _loss(out: torch.Tensor) -> torch.Tensor:
    return (out**2).sum()


def _passed_back(net: Net, x: torch.Tensor, scale: float) -> float:
    """The norm of what `att` passed back to h, its grad_input scaled by `scale`, in float64."""
    ref = copy.deepcopy(net).double()
    ref.att._backward_hooks.clear()
    h = ref.inp(x.double())
    a = ref.att(h)
    (g_a,) = torch.autograd.grad(_loss(ref.out(a + h)), a, retain_graph=True)
    (g_h,) = torch.autograd.grad(a, h, g_a)
    return scale * g_h.norm().item()


def _into_att(ex: GradExplorer) -> float:
    (edge,) = [e for e in ex.graph.view(depth=0).edges if e.dst == "module:att"]
    return edge.grad_norm


def test_a_modifier_on_a_module_shows_on_its_folded_input_edge() -> None:
    torch.manual_seed(0)
    net, x = Net(), torch.randn(3, 4)
    ex = GradExplorer(net, x, loss_fn=_loss)
    ex.set_modifier("att", scale=0.5)
    ex.run()
    assert math.isclose(_into_att(ex), _passed_back(net, x, 0.5), rel_tol=1e-5)
    ex.close()


def test_a_users_full_backward_hook_shows_on_its_folded_input_edge() -> None:
    torch.manual_seed(1)
    net, x = Net(), torch.randn(3, 4)
    net.att.register_full_backward_hook(lambda module, gi, go: (gi[0] * 0.25,))
    ex = GradExplorer(net, x, loss_fn=_loss)
    ex.run()
    assert math.isclose(_into_att(ex), _passed_back(net, x, 0.25), rel_tol=1e-5)
    # the producer's own gradient is the scaled part plus the residual's, as before
    ref = copy.deepcopy(net).double()
    h = ref.inp(x.double())
    h.retain_grad()
    _loss(ref.out(ref.att(h) + h)).backward()
    (producer,) = [n for n in ex.graph.nodes if n.id.startswith("inp/Addmm")]
    assert math.isclose(producer.grad_norm, h.grad.norm().item(), rel_tol=1e-5)
    ex.close()
