"""A forward that registers parameters, buffers or submodules on its first call (a lazy init)."""

from __future__ import annotations

import torch
from torch import nn

from gradviz_widgets import GradExplorer


class LazyInit(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "mask"):
            self.register_buffer("mask", torch.ones(8), persistent=False)
        if not hasattr(self, "scale"):
            self.scale = nn.Parameter(torch.full((8,), 2.0))
        if not hasattr(self, "extra"):
            self.body.extra = nn.Identity()
        return self.body(self.body.extra(x * self.mask * self.scale))


def test_the_model_is_as_before_and_the_report_says_what_it_lacks() -> None:
    model = LazyInit()
    keys = set(model.state_dict())
    modules = [n for n, _ in model.named_modules()]
    report = GradExplorer(model, torch.randn(4, 8)).run()
    assert set(model.state_dict()) == keys
    assert [n for n, _ in model.named_modules()] == modules
    assert not hasattr(model, "scale") and not hasattr(model, "mask")
    assert sorted(report.param_norms) == ["body.bias", "body.weight"]
    said = [f for f in report.findings if "registered" in f]
    # the parameter is what the report lacks; a buffer or a module without parameters is not
    assert len(said) == 1 and "scale" in said[0], report.findings
    assert "mask" not in said[0] and "body.extra" not in said[0]


class BufferCache(nn.Module):
    """A cache a forward makes for itself (a rotary table): no finding, and not left behind."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "table"):
            self.register_buffer("table", torch.arange(8.0), persistent=False)
        return self.body(x + self.table)


def test_a_buffer_made_in_forward_is_removed_without_a_finding() -> None:
    model = BufferCache()
    report = GradExplorer(model, torch.randn(4, 8)).run()
    assert not hasattr(model, "table")
    assert not [f for f in report.findings if "registered" in f]


def test_once_called_the_parameter_is_reported() -> None:
    model = LazyInit()
    x = torch.randn(4, 8)
    model(x)  # what the finding asks for
    report = GradExplorer(model, x).run()
    assert "scale" in report.param_norms
    assert not [f for f in report.findings if "registered" in f]
