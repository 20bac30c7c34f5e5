"""The loss row of a spike's frame follows the gradients' rule: the loss counts from the step
where it left its baseline and stayed out until its own spike, not from a noisy earlier step
that came back (a bad batch at step B must not read as "the loss moved 5 steps before")."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from gradviz_widgets import GradWatch
from gradviz_widgets.watch.baselines import SpikeRule
from gradviz_widgets.watch.spikes import Spike, SpikeFinder

BAD = 60  # the bad batch's step (the baselines need 20 steps first)
STEPS = BAD + 10
NAMES = ["a.weight", "b.weight"]


def _noisy_loss(step: int) -> float:
    return 0.16 * (1 + 0.15 * math.sin(1.7 * step))


def _series(blip: int | None = None, rise: int = 0) -> tuple[list[float], list[float]]:
    """Losses and gradient norms with the bad batch at BAD (loss x1000, gradients x100); `blip`:
    one loss 1.4x its level that comes back; `rise`: for that many steps first, the loss climbs
    from 1.35x its level (10% a step: out of its baseline but below the spike level)."""
    losses = [_noisy_loss(s) for s in range(STEPS)]
    grads = [1.0 + 0.05 * math.sin(1.3 * s) for s in range(STEPS)]
    if blip is not None:
        losses[blip] *= 1.4
    for k in range(rise):
        losses[BAD - rise + k] = 0.16 * 1.35 * 1.1**k
    losses[BAD] *= 1000.0
    grads[BAD] *= 100.0
    return losses, grads


def _find(losses: list[float], grads: list[float]) -> list[Spike]:
    """The writer's order: a step's loss is queued, then its gradient norms arrive."""
    finder = SpikeFinder(SpikeRule())
    missing = np.full((1, len(NAMES)), np.nan)  # no update ratios measured
    for step, (loss, grad) in enumerate(zip(losses, grads)):
        finder.queue_loss(step, loss)
        norms = np.full((1, len(NAMES)), grad)
        finder.add_steps(np.array([step]), norms, missing, missing, NAMES)
    finder.finish()
    return finder.found


def _loss_row(spike: Spike) -> dict:
    rows = [r for r in spike.rows if r["kind"] == "loss"]
    assert len(rows) == 1, spike.rows
    return rows[0]


def test_loss_blip_that_came_back_is_not_a_lead() -> None:
    losses, grads = _series(blip=BAD - 5)
    (spike,) = _find(losses, grads)
    assert (spike.step, spike.loss_step) == (BAD, BAD)
    row = _loss_row(spike)
    assert (row["first_step"], row["lead"]) == (BAD, 0)
    assert "at the loss's own step" in spike.sentence


def test_loss_that_rose_before_the_gradients_keeps_its_lead() -> None:
    losses, grads = _series(rise=3)
    (spike,) = _find(losses, grads)
    assert spike.loss_step == BAD
    row = _loss_row(spike)
    assert (row["first_step"], row["lead"]) == (BAD - 3, 3)
    assert all(r["lead"] == 0 for r in spike.rows if r["kind"] != "loss")


def test_loss_rise_counts_from_its_lasting_departure_not_an_earlier_blip() -> None:
    losses, grads = _series(blip=BAD - 6, rise=3)
    (spike,) = _find(losses, grads)
    row = _loss_row(spike)
    # the blip widened the loss's spread: its 1.35x at BAD - 3 is within 2 standard deviations
    # (not departed, baselines.departed); 1.49x at BAD - 2 is out, and stays out
    assert (row["first_step"], row["lead"]) == (BAD - 2, 2)


def test_watch_frame_reads_no_loss_lead_for_a_bad_batch(tmp_path: Path) -> None:
    """The repro through GradWatch: fixed losses given to log_loss, a layer whose gradient is
    constant (lr 0) until the bad batch scales its input."""
    torch.manual_seed(0)
    model = nn.Linear(4, 2, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    x, y = torch.ones(8, 4), torch.zeros(8, 2)
    losses, _ = _series(blip=BAD - 5)
    for step, loss in enumerate(losses):
        out = model(x * (100.0 if step == BAD else 1.0))
        opt.zero_grad()
        nn.functional.mse_loss(out, y).backward()
        watch.log_loss(loss)
        opt.step()
    watch.close()
    (spike,) = watch.spikes
    frame = spike.frame()
    loss = frame[frame.kind == "loss"]
    assert loss[["first_step", "lead"]].values.tolist() == [[BAD, 0]]
    assert spike.loss_step == BAD


def test_a_rise_is_the_peak_of_its_own_event_not_of_the_one_before() -> None:
    """The lead window reaches back 8 steps: a spike 6 steps before another gave the later
    event's rows the earlier one's peak ("up to 128x its baseline" from a spike before it: an
    outside try-out)."""
    finder = SpikeFinder(SpikeRule())
    missing = np.full((1, len(NAMES)), np.nan)
    for step in range(STEPS):
        finder.queue_loss(step, _noisy_loss(step))
        grad = 1.0 + 0.05 * math.sin(1.3 * step)
        norms = np.array([[grad, grad]])
        if step == BAD - 6:
            norms[0, 0] *= 100.0  # a.weight's first spike
        if step == BAD:
            norms[0] *= [10.0, 100.0]  # the second: b.weight leads, a.weight 10x
        finder.add_steps(np.array([step]), norms, missing, missing, NAMES)
    finder.finish()
    first, second = finder.found
    assert (first.step, second.step) == (BAD - 6, BAD)
    row = next(r for r in second.rows if r["name"] == "a.weight")
    assert 5 < row["rise"] < 20, row  # ~10x, its own event's; ~100x was the first event's
