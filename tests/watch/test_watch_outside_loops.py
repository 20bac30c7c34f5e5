"""Loops an outside tester wrote (stop 37) where the record stopped, nested or counted wrong
without a word: a second optimizer for a second phase of training, a run folder passed as
`path`, and a run resumed at `start_step`."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
from torch import nn

from gradviz_widgets.watch import GradWatch


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))


def _steps(model: nn.Module, opt: torch.optim.Optimizer, n: int) -> None:
    x = torch.randn(8, 4)
    for _ in range(n):
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()


def _messages(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "GradWatch" in str(w.message)]


def test_a_new_optimizer_for_a_second_phase_is_said_once(tmp_path: Path) -> None:
    """Head first, then everything with a NEW optimizer: the record stops at the head's last
    step, so the first step of the new one says so (once), naming how to record it."""
    model = _model()
    for p in model[0].parameters():
        p.requires_grad_(False)
    head = torch.optim.AdamW(model[2].parameters(), lr=1e-3)
    watch = GradWatch(model, optimizer=head, path=tmp_path)
    _steps(model, head, 3)
    for p in model.parameters():
        p.requires_grad_(True)
    everything = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _steps(model, everything, 4)
    watch.close()
    said = [m for m in _messages(caught) if "does not watch" in m]
    assert len(said) == 1, _messages(caught)
    assert "(AdamW) steps 4 watched parameter(s) (0.weight, 0.bias, 2.weight, 2.bias)" in said[0]
    assert "after step 2" in said[0] and "start_step=3" in said[0]
    assert caught[0].filename == __file__  # points at the user's loop
    assert watch.steps == 3  # the steps of the watched optimizer only, as said


def test_an_unwatched_optimizer_stepping_first_is_said_plainly(tmp_path: Path) -> None:
    """A wrapper (SAM) watched while its base optimizer steps: no "after step -1"."""
    model = _model()
    watched = torch.optim.SGD(model.parameters(), lr=1e-3)
    other = torch.optim.SGD(model.parameters(), lr=1e-3)
    watch = GradWatch(model, optimizer=watched, path=tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _steps(model, other, 2)
    watch.close()
    said = [m for m in _messages(caught) if "does not watch" in m]
    assert len(said) == 1 and "before any recorded step" in said[0], said


def test_another_models_optimizer_is_not_our_business(tmp_path: Path) -> None:
    """A GAN's other half: an optimizer over parameters we do not watch steps silently."""
    model, other = _model(), _model()
    opt, other_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, other))
    watch = GradWatch(model, optimizer=opt, path=tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            _steps(model, opt, 1)
            _steps(other, other_opt, 1)
    watch.close()
    assert _messages(caught) == []
    assert watch.steps == 2


def test_the_hook_goes_with_the_watch(tmp_path: Path) -> None:
    """Closing the watch takes its global optimizer hook away: nothing of it stays behind."""
    from torch.optim import optimizer as torch_optimizer

    before = dict(torch_optimizer._global_optimizer_pre_hooks)
    model = _model()
    watch = GradWatch(model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), path=tmp_path)
    assert len(torch_optimizer._global_optimizer_pre_hooks) == len(before) + 1
    watch.close()
    assert dict(torch_optimizer._global_optimizer_pre_hooks) == before


def test_a_run_folder_as_path_records_beside_it(tmp_path: Path) -> None:
    """`path=watch.run_path` (copied from the first run) starts the new run beside the first,
    not inside it: opening the first run's folder still reads the first run."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    first = GradWatch(model, optimizer=opt, path=tmp_path / "exp")
    _steps(model, opt, 5)
    first.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        second = GradWatch(model, optimizer=opt, path=first.run_path)
    _steps(model, opt, 2)
    second.close()
    assert second.path == tmp_path / "exp" and second.run_path.parent == tmp_path / "exp"
    assert any("is the folder of run" in str(w.message) for w in caught)
    assert caught[0].filename == __file__
    assert GradWatch.open(first.run_path).run_id == first.run_id
    assert GradWatch.open(first.run_path).history().step.max() == 4
    runs = GradWatch.open(tmp_path / "exp").runs
    assert [r.id for r in runs] == [first.run_id, second.run_id]


def test_a_resumed_run_counts_its_own_steps(tmp_path: Path) -> None:
    """start_step=65 and 10 steps: 10 steps recorded (65-74), not 75."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path, start_step=65)
    _steps(model, opt, 10)
    watch.close()
    assert watch.steps == 75 and watch.start_step == 65  # the next step's number
    assert "10 steps" in repr(watch)
    (run,) = GradWatch.open(tmp_path).runs
    assert (run.steps, run.first_step, run.last_step) == (10, 65, 74)
    assert "10 steps (65-74)" in repr(run)
