"""An excursion seen only in update ratios measured every N steps (the default `update_ratio=10`)
is one spike: the calm gap and the span of its event count measurements, not steps."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from gradviz_widgets import GradWatch


def run(path: Path, update_ratio: int) -> GradWatch:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    watch = GradWatch(model, optimizer=opt, path=path, update_ratio=update_ratio)
    x = torch.randn(512, 16)
    y = x @ torch.randn(16, 4)
    for i in range(400):
        for group in opt.param_groups:  # a warm restart: 10x the rate for 60 steps
            group["lr"] = 0.1 if 300 <= i < 360 else 0.01
        rows = torch.randint(0, 512, (32,))
        loss = (model(x[rows]) - y[rows]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        watch.log_loss(loss)
        opt.step()
    watch.close()
    return watch


def test_one_excursion_of_sampled_update_ratios_is_one_spike(tmp_path: Path) -> None:
    watch = run(tmp_path / "sampled", 10)
    spikes = [s for s in watch.spikes if s.step >= 300]
    assert [s.step for s in spikes] == [300], spikes
    assert spikes[0].end >= 310  # the next measurement belongs to the same event
    assert [a.step for a in watch.anomalies if a.kind == "spike" and a.step >= 300] == [300]


def test_the_pages_spike_row_says_the_events_sentence(tmp_path: Path) -> None:
    from gradviz_widgets.watch.page import page_data

    watch = run(tmp_path / "page", 10)
    sentence = {s.step: s.sentence for s in watch.spikes}[300]
    rows = {step: detail for step, kind, _, detail in page_data(watch)["anomalies"]}
    assert rows[300] == sentence and sentence


def test_the_pages_spike_row_keeps_the_first_mover_first(tmp_path: Path) -> None:
    from gradviz_widgets.watch.page import page_data

    watch = run(tmp_path / "order", 10)
    spike = next(a for a in watch.anomalies if a.kind == "spike" and a.step >= 300)
    data = page_data(watch)
    rows = next(r for step, kind, r, _ in data["anomalies"] if step == 300 and kind == "spike")
    assert [data["names"][r] for r in rows] == [p for p in spike.params if p in data["names"]]


def test_a_skipped_measurement_does_not_stretch_later_events() -> None:
    """Update ratios every 10 steps, one of them missing (a step the GradScaler skipped): two
    excursions 50 steps apart stay two events (the gap counts 3 measurements of 10 steps)."""
    import numpy as np

    from gradviz_widgets.watch.baselines import SpikeRule
    from gradviz_widgets.watch.spikes import SpikeFinder

    names = ["w"]
    finder = SpikeFinder(SpikeRule())
    for step in range(560):
        measured = step % 10 == 0 and step != 300
        high = 400 <= step <= 420 or 470 <= step <= 490
        dnorm = np.array([[(0.2 if high else 0.01) if measured else np.nan]])
        pnorm = np.array([[1.0 if measured else np.nan]])
        finder.add_steps(np.array([step]), np.array([[1.0]]), dnorm, pnorm, names)
    finder.finish()
    assert [s.step for s in finder.found] == [400, 470]
