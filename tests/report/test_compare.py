"""Comparing two runs: before/after a fix, two seeds, float32 vs float64."""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example
from gradviz_widgets.report.compare import compare_reports, norm_ratio

CE = nn.CrossEntropyLoss()


def test_before_and_after_reviving_the_gate() -> None:
    net, x, y = dead_branch_example()
    before = GradExplorer(net, x, loss_fn=CE, target=y).run()
    fixed = copy.deepcopy(net)
    with torch.no_grad():
        fixed.gate.bias.fill_(1.0)  # the gate opens: its gradient comes back
    after = GradExplorer(fixed, x, loss_fn=CE, target=y).run()
    table = before.compare(after)
    assert table.equals(compare_reports(before, after))
    assert list(table.index) == [p.name for p in before.params]
    assert list(table.columns[:5]) == ["module", "norm_a", "norm_b", "ratio", "status_a"]
    gate = table.loc["gate.weight"]
    assert gate.status_a == "zero" and gate.status_b != "zero" and gate.status_changed
    assert gate.norm_a == 0.0 and gate.norm_b > 0 and gate.ratio == math.inf
    for name, row in table.iterrows():
        assert row.norm_a == before.param_norms[name]
        assert row.norm_b == after.param_norms[name]
        if row.norm_a:
            assert math.isclose(row.ratio, row.norm_b / row.norm_a)


def test_same_run_twice_ratio_one_and_nothing_changed() -> None:
    net, x, y = dead_branch_example()
    ex = GradExplorer(net, x, loss_fn=CE, target=y)
    table = compare_reports(ex.run(), ex.run())
    assert not table.status_changed.any()
    finite = table[table.norm_a > 0]
    assert (finite.ratio == 1.0).all()


def test_none_and_new_parameters() -> None:
    torch.manual_seed(0)
    a_model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    a_model[0].requires_grad_(False)
    b_model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1), nn.Linear(1, 1))
    x = torch.randn(4, 3)
    table = compare_reports(GradExplorer(a_model, x).run(), GradExplorer(b_model, x).run())
    assert table.loc["0.weight"].status_a == "none" and math.isnan(table.loc["0.weight"].norm_a)
    assert math.isnan(table.loc["0.weight"].ratio) and table.loc["0.weight"].status_changed
    assert table.loc["2.weight"].status_a == "absent"
    assert table.index[-1] == "2.bias"


def test_norm_ratio_cases() -> None:
    assert norm_ratio(2.0, 1.0) == 0.5
    assert norm_ratio(0.0, 0.0) == 1.0
    assert norm_ratio(0.0, 2.0) == math.inf
    assert math.isnan(norm_ratio(None, None))
    assert math.isnan(norm_ratio(math.nan, 1.0))
    assert math.isnan(norm_ratio(1.0, math.inf))
