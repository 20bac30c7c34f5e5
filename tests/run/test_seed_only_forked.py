"""A run seeds only the generators it forked (CPU and the run's CUDA device)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz_widgets.run.capture import capture


@pytest.mark.skipif(torch.cuda.is_initialized(), reason="checks the lazy seeding of CUDA")
def test_cpu_run_leaves_other_accelerators_unseeded() -> None:
    # torch.manual_seed would queue a seed of every CUDA device (not forked by the run: the
    # user's stream would change on first use) and record a stack trace for it each run
    tracker = torch.cuda._lazy_seed_tracker
    before = tracker.manual_seed_all_cb, tracker.manual_seed_cb
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 1))
    first = capture(model, torch.ones(3, 4), seed=7).report.param_norms
    assert (tracker.manual_seed_all_cb, tracker.manual_seed_cb) == before
    again = capture(model, torch.ones(3, 4), seed=7).report.param_norms
    assert first == again  # still seeded: dropout draws the same mask


def test_seeded_run_does_not_move_the_users_stream() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    torch.manual_seed(3)
    expected = torch.rand(5)
    torch.manual_seed(3)
    capture(model, torch.ones(4, 2), seed=1)
    assert torch.equal(torch.rand(5), expected)
