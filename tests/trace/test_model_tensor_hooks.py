"""A tensor hook the model puts on an intermediate output in forward changes what enters that
output's node: the node shows what entered it, its consumer's edge what the consumer sent."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer

REL = 1e-12


class HalvedHidden(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1, self.l2 = nn.Linear(6, 5), nn.Linear(5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.l1(x)
        h.register_hook(lambda g: g * 0.5)
        return self.l2(torch.tanh(h))


def test_a_node_whose_output_the_model_hooks_shows_what_entered_it() -> None:
    torch.manual_seed(0)
    model, x = HalvedHidden(), torch.randn(4, 6)
    ex = GradExplorer(model, x)
    ex.run()
    seen: dict[str, torch.Tensor] = {}
    h = model.l1(x)
    h.register_hook(lambda g: seen.setdefault("sent", g.detach().clone()) * 0.5)
    model.l2(torch.tanh(h)).sum().backward()
    sent = seen["sent"].double().norm().item()
    node = ex.graph.node("l1/AddmmBackward0#0")
    into = next(e for e in ex.graph.edges if e.src == node.id)
    assert into.grad_norm == pytest.approx(sent, rel=REL)  # what tanh's backward sent
    assert node.grad_norm == pytest.approx(0.5 * sent, rel=REL)  # what entered, hooked
    # the parameters got what a plain backward gives them
    record = next(r for r in ex.report.params if r.name == "l1.weight")
    assert record.norm == pytest.approx(model.l1.weight.grad.double().norm().item(), rel=REL)
