"""Loops that change tensors through `.data`, which bumps no version counter."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from gradviz_widgets import GradWatch
from gradviz_widgets.watch import timing


class OutOfPlaceSGD(torch.optim.Optimizer):
    """Hand-written optimizers and SAM's second step give parameters new storage."""

    def __init__(self, params, lr: float = 0.1) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001, ANN201
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data = p.data - group["lr"] * p.grad


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))


def test_update_ratio_after_a_step_that_gives_new_storage(tmp_path: Path) -> None:
    model, x = _model(), torch.randn(16, 8)
    opt = OutOfPlaceSGD(model.parameters())
    watch = GradWatch(model, optimizer=opt, path=tmp_path, update_ratio=True)
    refs = []
    for _ in range(3):
        before = {n: p.detach().double().clone() for n, p in model.named_parameters()}
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        refs.append(
            {
                n: float((p.detach().double() - before[n]).norm() / before[n].norm())
                for n, p in model.named_parameters()
            }
        )
    watch.close()
    history = GradWatch.open(tmp_path).history()
    for step, ref in enumerate(refs):
        got = history[history.step == step].set_index("param").update_ratio
        if got.isna().all():
            continue  # steps the watch does not measure
        for name, expected in ref.items():
            assert got[name] == pytest.approx(expected, rel=1e-6), (step, name)
    assert (history.update_ratio.dropna() > 0).all()


def _clip_through_data(tmp_path: Path, start: int, steps: int) -> tuple[list[float], list]:
    model, x = _model(), torch.randn(16, 8) * 1e4
    opt = torch.optim.SGD(model.parameters(), lr=1e-9)
    pre = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watch = GradWatch(model, optimizer=opt, path=tmp_path)
        for step in range(steps):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            pre.append(sum(float(p.grad.double().pow(2).sum()) for p in model.parameters()) ** 0.5)
            if step >= start:
                for p in model.parameters():
                    p.grad.data.clamp_(-1, 1)  # the old DQN tutorial's clip
            opt.step()
        watch.close()
    return pre, [str(w.message) for w in caught]


def test_a_clip_through_data_is_recorded_before_it(tmp_path: Path) -> None:
    pre, said = _clip_through_data(tmp_path, start=0, steps=4)
    history = GradWatch.open(tmp_path).history()
    total = history.groupby("step").norm.apply(lambda s: float((s.astype(float) ** 2).sum() ** 0.5))
    assert list(total) == pytest.approx(pre, rel=1e-6)  # float32 on disk
    assert history.clipped.all()
    assert any("without a version bump" in s for s in said)


def test_a_clip_through_data_starting_late_is_found_at_the_next_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timing, "PROBE_EVERY", 4)
    pre, said = _clip_through_data(tmp_path, start=2, steps=8)
    history = GradWatch.open(tmp_path).history()
    total = history.groupby("step").norm.apply(lambda s: float((s.astype(float) ** 2).sum() ** 0.5))
    # found at step 4 (a probe): from there on the numbers are before the clip
    assert list(total)[4:] == pytest.approx(pre[4:], rel=1e-6)
    assert history[history.step >= 4].clipped.all()
    warned = [s for s in said if "without a version bump" in s]
    assert warned and "at step 4" in warned[0] and "steps 1-3 may hold" in warned[0]
    # the record says so too: steps 1-3 hold what the optimizer applied, clipped or not
    # (they read clipped=False, stated as fact, to anyone opening the run later)
    by_step = history.groupby("step").clipped.first()
    assert by_step[0] == False  # noqa: E712 (a probe: known unclipped)
    assert by_step[1:3].isna().all() and by_step[4:].all()
    rows = {r[0]: r for r in GradWatch.open(tmp_path).step_rows()}
    assert [rows[s][3] for s in (1, 2, 3)] == [None, None, None]


def test_a_late_clip_through_data_in_memory_says_unknown_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No path (the in-memory record): the same rows, among steps already written."""
    monkeypatch.setattr(timing, "PROBE_EVERY", 4)
    model, x = _model(), torch.randn(16, 8) * 1e4
    opt = torch.optim.SGD(model.parameters(), lr=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        watch = GradWatch(model, optimizer=opt)
        for step in range(8):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            if step >= 2:
                for p in model.parameters():
                    p.grad.data.clamp_(-1, 1)
            opt.step()
            if step == 2:
                watch.history()  # steps 0-2 written before the probe finds the clip
        watch.close()
    by_step = watch.history().groupby("step").clipped.first()
    assert by_step[0] == False  # noqa: E712
    assert by_step[1:3].isna().all() and by_step[4:].all()
