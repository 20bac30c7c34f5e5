"""Spike forensics on series whose truth is known (found by an outside try-out): a noisy
parameter is not named the first mover, update ratios measured every N steps do not stretch an
event of gradient norms, and the loss baseline follows a fast-falling loss."""

from __future__ import annotations

import numpy as np

from gradviz_widgets.watch.baselines import SpikeRule
from gradviz_widgets.watch.spikes import Spike, SpikeFinder

NAMES = ["0.weight", "4.bias"]


def _feed(
    norms: np.ndarray, ratios: np.ndarray | None = None, losses: list[float] | None = None
) -> list[Spike]:
    """The writer's order per step: its loss queued, then its norms (and update ratios)."""
    finder = SpikeFinder(SpikeRule())
    n = norms.shape[1]
    for step in range(len(norms)):
        if losses is not None:
            finder.queue_loss(step, losses[step])
        dnorm = np.full((1, n), np.nan) if ratios is None else ratios[step : step + 1]
        pnorm = np.ones((1, n))
        finder.add_steps(np.array([step]), norms[step : step + 1], dnorm, pnorm, NAMES[:n])
    finder.finish()
    return finder.found


def test_a_noisy_parameter_is_not_the_first_mover() -> None:
    rng = np.random.default_rng(0)
    steps, bad = 600, 500
    quiet = 1.0 + 0.02 * rng.standard_normal(steps)
    noisy = 0.05 * np.exp(1.0 * rng.standard_normal(steps))  # 2x moves are its noise
    base = float(np.exp(np.mean(np.log(noisy[:bad]))))
    noisy[bad - 2 : bad] = 3 * base  # an excursion of its usual size, just before ...
    noisy[bad] = 20 * base  # ... and the bad sample reaches it too, less than ...
    quiet[bad] *= 1e6  # ... the bad sample's layer
    found = [s for s in _feed(np.stack([quiet, noisy], axis=1)) if s.step == bad]
    assert len(found) == 1, found
    first = found[0].rows[0]
    assert (first["name"], first["first_step"], first["lead"]) == ("0.weight", bad, 0)
    assert [r["name"] for r in found[0].rows if r["lead"] > 0] == []


def test_sampled_update_ratios_do_not_stretch_an_event_of_gradient_norms() -> None:
    steps = 400
    t = np.arange(steps)
    norms = np.ones((steps, 1)) * (1 + 0.01 * np.sin(t))[:, None]
    ratios = np.full((steps, 1), np.nan)
    ratios[::10, 0] = 1e-3 * (1 + 0.01 * np.cos(t[::10]))
    # (the ratios' baseline needs 20 measurements: 200 steps)
    norms[299, 0] *= 50  # a gradient-norm spike, then one in the next sampled update ratio
    ratios[300, 0] *= 50
    norms[325, 0] *= 50  # a second, unrelated gradient spike
    found = _feed(norms, ratios)
    first = next(s for s in found if s.step == 299)
    assert first.end < 310, first  # the event ended after its own calm steps (was 30)
    assert 325 in [s.step for s in found]  # the later spike is an event of its own


def test_a_3x_loss_spike_on_a_fast_falling_loss_is_seen() -> None:
    steps, bad = 160, 120
    losses = [5.0 * 0.96**s * (1 + 0.02 * np.sin(1.3 * s)) for s in range(steps)]
    losses[bad] *= 3.0
    norms = np.ones((steps, 1)) * (1 + 0.01 * np.sin(np.arange(steps)))[:, None]
    found = _feed(norms, losses=losses)
    assert [s.loss_step for s in found] == [bad], found


def test_an_event_opened_by_a_sampled_update_ratio_does_not_absorb_a_later_gradient_spike() -> None:
    """From outside: a scalar bias's update ratio (measured every 10 steps) opened an event at
    step 490; its slow pace absorbed the batch scaled x1000 at step 537, and the one spike
    read "step 490: started in 0 (gradient norm ...)", a module that left at 516."""
    steps = 700
    t = np.arange(steps)
    norms = np.stack([1 + 0.01 * np.sin(t), 1 + 0.01 * np.cos(t)], axis=1)
    ratios = np.full((steps, 2), np.nan)
    ratios[::10] = 1e-3 * (1 + 0.01 * np.cos(t[::10]))[:, None]
    ratios[490, 1] *= 40  # the bias's update ratio jumps ...
    ratios[510, 1] *= 20  # ... and again, keeping its event open at the ratios' pace
    norms[537, 0] *= 50  # the real gradient spike, 47 steps after the ratio's
    found = _feed(norms, ratios)
    by_step = {s.step: s for s in found}
    assert 537 in by_step, found  # an event of its own, named for what started it
    assert by_step[537].sentence.startswith("step 537: started in 0 (gradient norm")
    assert by_step[490].sentence.startswith("step 490: started in 4 (update ratio")
    assert by_step[490].end < 537
