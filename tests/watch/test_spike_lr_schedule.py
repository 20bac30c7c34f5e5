"""A learning-rate warm-up is no spike: the update ratio of a run warming its learning rate up
rises all along (Adam's update is about lr per element), and the spike rule found "spikes" in
ordinary warm-ups, each update-ratio series crossing 4x a baseline that lagged the ramp. A
spike now starts with a jump (sqrt(factor) x the series' previous value) and goes on while the
series stays up; a real spike in such a run is still found (and tests/watch/test_watch_spikes.py
finds a learning rate set 100x too high at its step)."""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

from gradviz_widgets import GradWatch


def _run(tmp_path, spike_at: int | None, steps: int = 100, horizon: int = 500) -> GradWatch:
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Flatten(),
        nn.Linear(192, 128),
        nn.GELU(),
        nn.LayerNorm(128),
        nn.Linear(128, 128),
        nn.GELU(),
        nn.Linear(128, 10),
    )
    opt = torch.optim.AdamW(net.parameters(), 3e-3, weight_decay=0.01)
    ramp = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 100) * 0.5 * (1 + math.cos(math.pi * s / horizon))
    )
    watch = GradWatch(net, optimizer=opt, path=tmp_path, update_ratio=True)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(192, 10, generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(steps):
            x = torch.randn(32, 3, 8, 8, generator=g)
            y = (x.flatten(1) @ w).argmax(1)
            loss = nn.functional.cross_entropy(net(x), y)
            opt.zero_grad()
            (loss * (1000.0 if k == spike_at else 1.0)).backward()
            watch.log_loss(loss)
            opt.step()
            ramp.step()
        watch.close()
    return watch


def test_a_warm_up_and_cosine_schedule_is_no_spike(tmp_path):
    assert _run(tmp_path, None).spikes == []


def test_a_real_spike_during_the_warm_up_is_still_found(tmp_path):
    spikes = _run(tmp_path, 40).spikes
    assert [s.step for s in spikes] == [40]
