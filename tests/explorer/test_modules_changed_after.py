"""Modules added to or deleted from the model after the explorer was made."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer, GradExplorerError


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(3, 3)
        self.aux = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return self.aux(y) if hasattr(self, "aux") else y


def test_a_module_added_later_can_be_hooked() -> None:
    model = Net()
    ex = GradExplorer(model, torch.randn(2, 3))
    model.extra = nn.Linear(3, 3)
    assert ex.toggle_hook("extra") is True
    ex.set_modifier("extra", scale=0.5)
    ex.run()


def test_a_hooked_module_deleted_later_is_named_and_the_hook_can_go() -> None:
    model = Net()
    ex = GradExplorer(model, torch.randn(2, 3))
    ex.toggle_hook("aux")
    ex.set_modifier("aux", scale=2.0)
    ex.run()
    del model.aux
    with pytest.raises(GradExplorerError, match="'aux'.*no longer in the model"):
        ex.run()
    assert ex.toggle_hook("aux") is False  # turning it off needs no module
    ex.set_modifier("aux")  # nor does removing a modifier
    report = ex.run()
    assert sorted(report.param_norms) == ["body.bias", "body.weight"]
    with pytest.raises(GradExplorerError, match="no module 'aux'"):
        ex.toggle_hook("aux")  # turning one on still does
