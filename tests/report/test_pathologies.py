"""Vanishing, exploding and non-finite gradients are told apart and located."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer, Thresholds
from gradviz_widgets.examples import (
    exploding_example,
    nan_mid_graph_example,
    relu_residual_mlp,
    sigmoid_mlp,
)

CE = nn.CrossEntropyLoss()


def test_sigmoid_mlp_first_layers_vanish_not_zero() -> None:
    torch.manual_seed(0)
    model = sigmoid_mlp(48, 8)
    x = torch.randn(4, 8)
    report = GradExplorer(model, x).run()
    # in float32, plain backward's norm of these gradients underflows to exactly 0.0 ...
    twin = copy.deepcopy(model)
    twin(x).sum().backward()
    assert twin.fc0.weight.grad.norm().item() == 0.0
    assert twin.fc0.weight.grad.abs().max().item() > 0  # ... though the elements are not zero
    # ... the explorer accumulates in float64 and reports the true, tiny norm
    for i in range(3):
        for kind in ("weight", "bias"):
            name = f"fc{i}.{kind}"
            assert report.param_status[name] == "vanishing", name
            assert 0 < report.param_norms[name] < 1e-20, name
    assert report.param_norms["fc0.weight"] == pytest.approx(
        twin.fc0.weight.grad.double().norm().item(), rel=1e-6
    )
    assert report.param_status["head.weight"] == "healthy"
    assert any("vanishing" in f and "fc0.weight" in f for f in report.findings)


def test_relu_residual_mlp_is_healthy_where_sigmoid_vanishes() -> None:
    torch.manual_seed(0)
    model = relu_residual_mlp(48, 8)
    report = GradExplorer(model, torch.randn(4, 8)).run()
    assert set(report.param_status.values()) == {"healthy"}
    first, last = report.param_norms["stem.weight"], report.param_norms["head.weight"]
    assert 1e-3 < first / last < 1e3


def test_exploding_example() -> None:
    model, x, y = exploding_example()
    report = GradExplorer(model, x, loss_fn=CE, target=y).run()
    assert report.param_status["fc0.weight"] == "exploding"
    assert report.param_norms["fc0.weight"] > 1e4
    assert math.isfinite(report.loss)
    assert any("exploding" in f and "fc0.weight" in f for f in report.findings)
    # thresholds are the user's to set
    relaxed = GradExplorer(
        model, x, loss_fn=CE, target=y, thresholds=Thresholds(exploding=1e12)
    ).run()
    assert relaxed.param_status["fc0.weight"] == "healthy"


def test_nan_in_backward_is_located_in_unsafe() -> None:
    model, x, y = nan_mid_graph_example("backward")
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    report = ex.run()
    assert math.isfinite(report.loss)
    assert report.param_status["fc1.weight"] == "nonfinite"
    assert math.isnan(report.param_norms["fc1.weight"])
    assert report.param_status["head.weight"] == "healthy"
    assert report.param_status["head.bias"] == "healthy"
    origin = report.nonfinite_origin
    assert origin is not None
    node = ex.graph.node(origin)
    assert node.module == "unsafe"
    assert any(path == "unsafe" for path, _ in node.scope)
    # the origin received a finite gradient and emitted a non-finite one
    assert node.status != "nonfinite"
    assert any(e.status == "nonfinite" for e in ex.graph.edges if e.dst == origin)
    assert any("NaN" in f and origin in f for f in report.findings)


def test_nan_in_forward_gives_nan_loss_and_says_so() -> None:
    model, x, y = nan_mid_graph_example("forward")
    report = GradExplorer(model, x, loss_fn=CE, target=y).run()
    assert math.isnan(report.loss)
    assert report.findings[0].startswith("the loss is NaN")
    assert "forward" in report.findings[0]
    assert set(report.param_status.values()) == {"nonfinite"}
    # the op of the forward that made the NaN (a rerun looks for it: run/forward_nan.py), not
    # the op nearest the loss that turns NaN first in backward
    assert report.nonfinite_origin == "unsafe/SqrtBackward0#0"
    assert "first at unsafe/SqrtBackward0#0" in report.findings[0]


def test_nan_inputs_give_a_report() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2))
    x = torch.randn(3, 4)
    x[1, 2] = float("nan")
    report = GradExplorer(model, x, loss_fn=CE, target=torch.tensor([0, 1, 1])).run()
    assert math.isnan(report.loss)
    assert report.param_status["0.weight"] == "nonfinite"
    # where the NaN enters the graph; the input's own finding says where it came from
    assert report.nonfinite_origin == "0/AddmmBackward0#0"
    assert report.findings[0].startswith("the loss is NaN")
    assert any(f.startswith("input 0 holds NaN/Inf") for f in report.findings)


def test_inf_input_finite_loss_nan_weight_gradient() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2))
    x = torch.randn(3, 4)
    x[1, 2] = float("inf")
    ex = GradExplorer(model, x, loss_fn=CE, target=torch.tensor([0, 1, 1]))
    report = ex.run()
    twin = copy.deepcopy(model)
    loss = CE(twin(x), torch.tensor([0, 1, 1]))
    loss.backward()
    assert report.loss == loss.item() and math.isfinite(report.loss)  # the ReLU zeroed the infs
    # 0 * inf in the first layer's weight gradient
    assert not twin[0].weight.grad.isfinite().all()
    assert report.param_status["0.weight"] == "nonfinite"
    assert report.param_status["2.weight"] == "healthy"
    assert report.nonfinite_origin == "0/AddmmBackward0#0"
    assert ex.graph.node(report.nonfinite_origin).module == "0"


def test_the_rerun_of_a_nan_loss_leaves_one_runs_events_and_the_rng_alone() -> None:
    """A NaN loss is run once more to find the forward op that made it: the hooks' events are
    the last run's only, and the user's random stream is where it was."""
    model, x, y = nan_mid_graph_example("forward")
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    ex.set_hook("unsafe", "backward")
    rng = torch.get_rng_state()
    report = ex.run()
    assert torch.equal(torch.get_rng_state(), rng)
    assert report.nonfinite_origin == "unsafe/SqrtBackward0#0"
    assert len({(e.target, e.call, e.phase) for e in ex.events}) == len(ex.events) > 0
