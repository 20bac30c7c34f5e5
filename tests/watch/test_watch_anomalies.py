"""Anomalies name the first bad step; the flight recorder replays it in a GradExplorer."""

from __future__ import annotations

import warnings

import pytest
import torch
from model_state import model_state
from torch import nn

from gradviz_widgets.errors import GradExplorerError
from gradviz_widgets.examples import nan_mid_graph_net
from gradviz_widgets.watch import GradWatch

CE = nn.CrossEntropyLoss()


def run_until_nan(path, bad_step=3, steps=5, **options):
    torch.manual_seed(0)
    model = nan_mid_graph_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=path, **options)
    g = torch.Generator().manual_seed(1)
    before = bad_x = None
    for step in range(steps):
        x = torch.randn(4, 8, generator=g)
        if step == bad_step:
            x[1] = 0.0  # an all-zero row: NaN gradient in fc1.weight, finite loss
            before = {k: v.clone() for k, v in model.state_dict().items()}
            bad_x = x.clone()
        opt.zero_grad()
        CE(model(x), torch.tensor([0, 1, 2, 0])).backward()
        opt.step()
    return model, watch, before, bad_x


def test_first_nan_step_is_an_anomaly_with_a_flight_record(tmp_path):
    model, watch, before, bad_x = run_until_nan(tmp_path / "run")
    nan = [a for a in watch.anomalies if a.kind == "nonfinite"]
    assert nan[0].step == 3 and "fc1.weight" in nan[0].params
    record = nan[0].flight_record
    assert record is not None and record.step == 3
    assert torch.equal(record.args[0], bad_x)
    for k, v in before.items():
        assert torch.equal(record.state[k], v), k  # the state before the bad update
    state = model_state(model)
    values = {n: p.detach().clone() for n, p in model.named_parameters()}
    ex = nan[0].explore()
    assert ex.report.nonfinite_origin is not None
    assert "unsafe" in ex.report.nonfinite_origin
    for n, p in model.named_parameters():  # explore() works on a copy (NaN != NaN: compare so)
        torch.testing.assert_close(p.detach(), values[n], equal_nan=True)
    assert model_state(model)["hooks"] == state["hooks"]
    watch.close()


def test_a_replay_with_the_sum_of_the_output_as_its_loss_says_so(tmp_path):
    """Without loss_fn the replay differentiates the sum of the logits, not the training
    cross-entropy: its NaN/Inf gradients can differ from the watch's, and it warns; given the
    training loss (it closes over the step's target here) it says nothing."""
    _, watch, _, _ = run_until_nan(tmp_path / "run")
    nan = next(a for a in watch.anomalies if a.kind == "nonfinite")
    with pytest.warns(UserWarning, match="sum of output as its loss"):
        nan.explore()
    target = torch.tensor([0, 1, 2, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ex = nan.explore(loss_fn=lambda out: CE(out, target))
    assert "sum of" not in ex.report.loss_description
    watch.close()


def test_a_crashed_run_read_back_explores_with_a_model(tmp_path):
    model, watch, _, _ = run_until_nan(tmp_path / "run")
    watch.close()
    run = GradWatch.open(tmp_path / "run")
    nan = [a for a in run.anomalies if a.kind == "nonfinite"][0]
    assert nan.step == 3
    with pytest.raises(GradExplorerError, match="pass one"):
        nan.explore()
    assert nan.explore(nan_mid_graph_net()).report.nonfinite_origin is not None


def test_threshold_trigger_and_no_record_message(tmp_path):
    _, watch, _, _ = run_until_nan(tmp_path / "run", bad_step=10, steps=4, flight_recorder=0.01)
    assert watch._flights and min(watch._flights) == 0  # norms above 0.01 from the start
    _, quiet, _, _ = run_until_nan(tmp_path / "q", flight_recorder=False)
    nan = [a for a in quiet.anomalies if a.kind == "nonfinite"][0]
    with pytest.raises(GradExplorerError, match="no flight record"):
        nan.explore()
    watch.close()
    quiet.close()
