"""A run that meets NaN/Inf names the parameters and inputs that hold them (the most likely
start), right after the loss line; a healthy run asks nothing more."""

from __future__ import annotations

import torch
from torch import nn

from gradviz_widgets import GradExplorer


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def test_a_parameter_holding_nan_is_named_first() -> None:
    net = _net()
    with torch.no_grad():
        net[2].weight[0, 1] = float("nan")
    report = GradExplorer(net, torch.randn(5, 3)).run()
    assert report.findings[0].startswith("the loss is NaN")
    assert report.findings[1] == (
        "parameter 2.weight holds NaN/Inf (1 of 8 elements): non-finite values start there, "
        "not in an op"
    )
    assert report.host_syncs == 2  # the run's one, and one to find the holder


def test_an_input_holding_inf_is_named() -> None:
    x = torch.randn(5, 3)
    x[2, 0] = float("inf")
    report = GradExplorer(_net(), x).run()
    # tanh saturates at Inf, so the loss is finite: the holder comes first
    assert report.findings[0].startswith("input 0 holds NaN/Inf (1 of 15 elements)")


def test_a_healthy_run_asks_nothing_more() -> None:
    report = GradExplorer(_net(), torch.randn(5, 3)).run()
    assert report.host_syncs == 1
    assert not any("holds NaN/Inf" in f for f in report.findings)


def test_a_parameter_and_an_input_both_holding_nan_cost_one_more_sync() -> None:
    net = _net()
    with torch.no_grad():
        net[0].bias[1] = float("nan")
    x = torch.randn(5, 3)
    x[0, 0] = float("nan")
    report = GradExplorer(net, x).run()
    assert report.findings[1].startswith("parameter 0.bias holds NaN/Inf (1 of 4 elements)")
    assert report.findings[2].startswith("input 0 holds NaN/Inf (1 of 15 elements)")
    assert report.host_syncs == 2
