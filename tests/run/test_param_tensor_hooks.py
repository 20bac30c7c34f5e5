"""The user's own tensor hooks on parameters act in explorer runs, as in `.backward()`."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    # 80 x 80 = 6,400 elements: over NormBatch.SMALL, measured as it arrives
    return nn.Sequential(
        nn.Linear(8, 80), nn.Tanh(), nn.Linear(80, 80), nn.Tanh(), nn.Linear(80, 3)
    )


def _hook(model: nn.Sequential, calls: list[str]) -> None:
    def scaled(g: torch.Tensor) -> torch.Tensor:
        calls.append("scaled")
        return g * 10

    model[2].weight.register_hook(scaled)  # large: its gradient is measured on arrival
    model[4].weight.register_hook(lambda g: g.clamp(-1e-3, 1e-3))  # small: read back
    model[0].bias.register_hook(torch.zeros_like)


def _reference(model: nn.Sequential, x: torch.Tensor) -> dict[str, float]:
    ref = copy.deepcopy(model).double()  # a deep copy drops tensor hooks: hooked again
    _hook(ref, [])
    ref(x.double()).sum().backward()
    return {n: float(p.grad.norm()) for n, p in ref.named_parameters()}


def test_parameter_hooks_change_the_norms_as_in_backward() -> None:
    model, calls = _model(), []
    _hook(model, calls)
    x = torch.randn(4, 8)
    report = GradExplorer(model, x).run()
    ref = _reference(model, x)
    assert calls  # the hook ran in the run (on the stand-in)
    for name, expected in ref.items():
        assert report.param_norms[name] == pytest.approx(expected, rel=1e-5), name
    assert report.param_norms["0.bias"] == 0.0
    assert report.param_status["0.bias"] == "zero"


def test_the_model_keeps_its_hook_dicts_and_grad() -> None:
    model, calls = _model(), []
    _hook(model, calls)
    before = {
        n: (p._backward_hooks, dict(p._backward_hooks or {})) for n, p in model.named_parameters()
    }
    GradExplorer(model, torch.randn(4, 8)).run()
    for n, p in model.named_parameters():
        assert p._backward_hooks is before[n][0]
        assert dict(p._backward_hooks or {}) == before[n][1]
        assert p.grad is None


def test_post_accumulate_hooks_do_not_fire() -> None:
    """They act on `.grad` (an optimizer stepped in backward), which a run never writes."""
    model, fired = _model(), []
    model[2].weight.register_post_accumulate_grad_hook(lambda p: fired.append(p))
    GradExplorer(model, torch.randn(4, 8)).run()
    assert fired == []
