"""A NaN/Inf loss given to `watch.log_loss` is an anomaly of its own (an outside try-out): a loop
that guards against a bad batch (zero the gradients, skip `optimizer.step`) left no NaN/Inf
gradient in the record, every status healthy, no anomaly, and the NaN loss averaged into the
next step's loss without a word."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.anomalies import NONFINITE_LOSS
from gradviz_widgets.watch.page import page_data


def _guarded(path, bad=(4,), **options):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    watch = GradWatch(model, optimizer=opt, path=path, **options)
    g = torch.Generator().manual_seed(1)
    skipped = 0
    for it in range(10):
        x, y = torch.randn(5, 8, generator=g), torch.randint(0, 4, (5,), generator=g)
        if it in bad:
            x[0, 0] = float("nan")
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        watch.log_loss(loss)
        if not all(torch.isfinite(p.grad).all() for p in model.parameters()):
            opt.zero_grad()  # the guard: this batch is skipped
            skipped += 1
            continue
        opt.step()
    watch.close()
    return watch, skipped


@pytest.mark.parametrize("spikes", [True, False])
def test_a_skipped_nan_batch_leaves_its_loss_as_an_anomaly(tmp_path, spikes):
    watch, skipped = _guarded(tmp_path / "run", spikes=spikes)
    assert skipped == 1
    h = watch.history()
    assert (h.status == "healthy").all()  # the gradients recorded are the good batches'
    (a,) = watch.anomalies
    assert (a.step, a.kind, a.params) == (4, NONFINITE_LOSS, ["loss"])
    assert a.detail.startswith("the loss is nan") and "skipped" in a.detail
    opened = GradWatch.open(watch.run_path)  # stored, read back alike
    assert [(b.step, b.kind, b.params, b.detail) for b in opened.anomalies] == [
        (4, NONFINITE_LOSS, ["loss"], a.detail)
    ]
    row = page_data(opened)["anomalies"][0]
    assert row[0] == 4 and row[3] == a.detail
    opened.close()


def test_only_the_first_nan_loss_is_said(tmp_path):
    watch, skipped = _guarded(tmp_path / "run", bad=(2, 6))
    assert skipped == 2
    assert [(a.step, a.params) for a in watch.anomalies] == [(2, ["loss"])]


def test_finite_losses_say_nothing(tmp_path):
    watch, skipped = _guarded(tmp_path / "run", bad=())
    assert skipped == 0 and watch.anomalies == []
    assert math.isfinite(float(watch.history().norm.max()))


def test_a_nan_loss_beside_nan_gradients_is_kept_on_disk(tmp_path):
    """Its own kind: a record keeps one row per step and kind, and a NaN loss at the step the
    parameters turned NaN (no guard) had replaced their row on disk (an outside try-out)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    for it in range(4):
        x, y = torch.randn(5, 8), torch.randint(0, 4, (5,))
        if it == 2:
            x[0, 0] = float("nan")
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        watch.log_loss(loss)
        opt.step()
    watch.close()
    live = sorted((a.step, a.kind) for a in watch.anomalies)
    assert (2, NONFINITE_LOSS) in live and (2, "nonfinite") in live
    opened = GradWatch.open(watch.run_path)
    assert sorted((a.step, a.kind) for a in opened.anomalies) == live
    page = page_data(opened)
    assert page["kinds"][NONFINITE_LOSS][1] == "NaN/Inf loss"
    assert len(page["anomalies"]) == len(live)
    opened.close()
