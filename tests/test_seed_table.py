"""The dead-branch lesson: the explorer's norm table is the one plain `.backward()` gives."""

from __future__ import annotations

import pytest
import torch
from small_models import SEED_TABLE
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example

TABLE = SEED_TABLE


@pytest.fixture(scope="module")
def run():
    net, x, y = dead_branch_example()
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    return net, x, y, ex, ex.run()


def test_norm_table_exact(run) -> None:
    *_, report = run
    assert list(report.param_norms) == list(TABLE)  # named_parameters order
    assert {k: round(v, 4) for k, v in report.param_norms.items()} == TABLE


def test_dead_params_are_zero_not_none(run) -> None:
    *_, report = run
    status = report.param_status
    assert {k: status[k] for k in ("gate.weight", "gate.bias", "dead.weight")} == {
        "gate.weight": "zero",
        "gate.bias": "zero",
        "dead.weight": "zero",
    }
    assert all(
        status[k] == "healthy"
        for k in ("main1.weight", "main1.bias", "dead.bias", "main2.weight", "main2.bias")
    )
    assert report.none_reasons == {}
    # zero is an exact 0.0, not a tiny number
    assert all(report.param_norms[k] == 0.0 for k in ("gate.weight", "gate.bias", "dead.weight"))


def test_zero_origins(run) -> None:
    *_, ex, report = run
    origins = report.zero_origins
    assert set(origins) == {"gate.weight", "gate.bias", "dead.weight"}
    graph = ex.graph
    for name in ("gate.weight", "gate.bias"):
        node = graph.node(origins[name])
        assert node.op == "ReluBackward0"
        assert node.module == ""  # torch.relu is called in DeadBranchNet.forward itself
        # the relu received a non-zero gradient and passed zeros back toward the gate
        assert node.grad_norm > 0
        gate_out = [e for e in graph.edges if e.dst == node.id and e.src.startswith("gate/")]
        assert len(gate_out) == 1 and gate_out[0].grad_max == 0.0
    dead = graph.node(origins["dead.weight"])
    assert dead.op == "AddmmBackward0" and dead.module == "dead"
    assert dead.id == "dead/AddmmBackward0#0"
    assert "dead" in " ".join(report.findings) and "0.0" in " ".join(report.findings)


def test_loss_equals_plain_computation(run) -> None:
    net, x, y, _, report = run
    with torch.no_grad():
        plain = nn.CrossEntropyLoss()(net(x), y).item()
    assert report.loss == plain
    assert report.loss_description == "CrossEntropyLoss(output, target)"


def test_module_norms_combine_param_norms(run) -> None:
    *_, report = run
    n = report.param_norms
    assert report.module_norms["gate"] == 0.0
    assert report.module_norms["main1"] == pytest.approx(
        (n["main1.weight"] ** 2 + n["main1.bias"] ** 2) ** 0.5, rel=1e-12
    )
    assert report.module_norms[""] == pytest.approx(sum(v**2 for v in n.values()) ** 0.5, rel=1e-12)
