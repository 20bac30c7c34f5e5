"""A gradient changed in place between backward and `optimizer.step` keeps its pre-change numbers
only when the change is a clipping (each gradient scaled by a factor in (0, 1], or max |g| cut
to one value), and not an average by hand (every gradient divided by one integer). Otherwise the record holds what the optimizer applied: a `zero_grad` before `step`
(the optimizer applies zeros) had been recorded healthy with no anomaly, and data parallelism
written by hand (`all_reduce(p.grad); p.grad /= world`, PyTorch's tutorial) recorded each rank's
own pre-average gradient and raised a false `rank_divergence`."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from small_models import CE, data, mlp
from test_distributed_launch import launch, stop_forkserver
from torch import nn

from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.timing import clip_like, divided_by

stop = pytest.fixture(scope="module", autouse=True)(stop_forkserver)


def _applied(model: nn.Module) -> dict[str, float]:
    return {n: float(p.grad.double().norm()) for n, p in model.named_parameters()}


def _loop(model: nn.Module, change, steps: int = 3) -> tuple[Any, list[dict[str, float]]]:
    opt = torch.optim.SGD(model.parameters(), 0.1)
    watch = GradWatch(model, optimizer=opt)
    x, y = data()
    seen = []
    for _ in range(steps):
        opt.zero_grad()
        CE(model(x), y).backward()
        change(model, opt)
        seen.append(_applied(model))
        opt.step()
    return watch, seen


def _kept_before_clipping(watch: Any, pre: list, seen: list, unclipped: str = "-") -> None:
    """Every row `clipped` and its norm the one before clipping (`pre`), above what the
    optimizer applied (`seen`) but in the `unclipped` module."""
    h = watch.history()
    watch.close()
    assert h.clipped.tolist() == [True] * len(h)
    for k in range(3):
        rows = h[h.step == k].set_index("param")
        for name, norm in pre[k].items():
            assert rows.loc[name, "norm"] == pytest.approx(norm, rel=1e-6)  # float32 store
            assert seen[k][name] < norm or name.startswith(unclipped)


def test_a_zero_grad_before_step_is_recorded_as_zero_with_its_anomaly():
    with pytest.warns(UserWarning, match="in a way no clipping does"):
        watch, seen = _loop(mlp(), lambda m, opt: opt.zero_grad(set_to_none=False))
    h = watch.history()
    watch.close()
    assert all(v == 0.0 for step in seen for v in step.values())
    assert (h.norm == 0.0).all() and (h.status == "zero").all()
    assert not h.clipped.fillna(True).any()
    zero = [a for a in watch.anomalies if a.kind == "zero"]
    assert zero and zero[0].step == 0


def test_a_clip_grad_norm_still_keeps_the_pre_clip_numbers():
    pre: list[dict[str, float]] = []

    def clip(model: nn.Module, opt: object) -> None:
        pre.append(_applied(model))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "no clipping" warning
        watch, seen = _loop(mlp(), clip)
    _kept_before_clipping(watch, pre, seen)


def test_the_rule_on_readings():
    pre = torch.tensor([[2.0, 1.0, 3.0], [4.0, 3.0, 3.0], [0.0, 0.0, 0.0]])
    cut = pre.clone()
    cut[1, :2] = torch.tensor([3.5, 1.0])  # clip_grad_value_(1.0): max cut to 1.0
    assert clip_like(pre, pre * torch.tensor([0.25, 0.25, 1.0])) is True
    assert clip_like(pre, cut) is True
    assert clip_like(pre, pre) is True
    assert clip_like(pre, pre * 0) is False  # zeroed
    assert clip_like(pre, pre * torch.tensor([[0.5], [2.0], [1.0]])) is False  # averaged
    assert clip_like(pre, pre * torch.tensor([[0.5], [0.2], [1.0]])) is True  # per sub-network
    assert clip_like(pre, pre * torch.tensor([[0.5, 0.4, 1.0]])) is False  # not a scaling
    assert divided_by(pre, pre * torch.tensor([0.125, 0.125, 1.0])) == (True, 8)
    assert divided_by(pre, pre / 3) == (True, 3)
    assert divided_by(pre, pre * 0.3)[0] is False  # a clipping factor
    assert divided_by(pre, pre * torch.tensor([[0.5], [0.25], [1.0]]))[0] is False  # two
    assert divided_by(pre, pre)[0] is False  # unchanged
    assert clip_like(pre, pre * 2) is False  # grew: no clip does
    boom = pre.clone()
    boom[0, 0] = float("inf")
    assert clip_like(boom, pre * 0) is True  # the explosion is what the record keeps


def test_clipping_each_sub_network_on_its_own_keeps_the_pre_clip_numbers():
    """PPO / actor-critic: `clip_grad_norm_` of the actor, then of the critic, two factors.
    They had been taken for "a change no clipping does": the record held the clipped norms."""
    pre: list[dict[str, float]] = []

    def clip(model: nn.Module, opt: object) -> None:
        pre.append(_applied(model))
        torch.nn.utils.clip_grad_norm_(model[0].parameters(), 1e-3)
        torch.nn.utils.clip_grad_norm_(model[2].parameters(), 2e-3)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        watch, seen = _loop(mlp(), clip)
    _kept_before_clipping(watch, pre, seen, unclipped="fc3")


def test_an_average_by_hand_records_the_divided_gradient():
    """`p.grad /= 4` after four micro-batches is no clipping: it had been recorded as one (the
    norms 4x what the optimizer applied, `clipped` True on every step)."""

    def average(model: nn.Module, opt: object) -> None:
        for p in model.parameters():
            p.grad /= 4

    with pytest.warns(UserWarning, match="divided by 4") as caught:
        watch, seen = _loop(mlp(), average)
    assert sum("divided by" in str(w.message) for w in caught) == 1
    h = watch.history()
    watch.close()
    assert not h.clipped.fillna(True).any()
    for k in range(3):
        rows = h[h.step == k].set_index("param")
        for name, norm in seen[k].items():
            assert rows.loc[name, "norm"] == pytest.approx(norm, rel=1e-6)


def test_a_division_after_clipping_steps_is_read_as_a_clipping():
    """A clipping factor is 1/k once in a long while: a run whose changes were clippings keeps
    reading such a step as one."""

    def change(model: nn.Module, opt: object) -> None:
        change.k += 1  # type: ignore[attr-defined]
        if change.k == 1:  # type: ignore[attr-defined]
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
        else:
            for p in model.parameters():
                p.grad /= 2

    change.k = 0  # type: ignore[attr-defined]
    watch, seen = _loop(mlp(), change)
    h = watch.history()
    watch.close()
    assert h.clipped.tolist() == [True] * len(h)


def _hand_averaged(rank: int, world: int, folder: Path) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=folder / "run", flush_s=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    applied = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            x, y = torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g)
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            for p in model.parameters():  # average_gradients(model)
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
                p.grad /= world
            applied.append(_applied(model))
            opt.step()
        h = watch.history()
        watch.close()
    dist.barrier()
    recorded = [dict(zip(h[h.step == s].param, h[h.step == s].norm)) for s in range(3)]
    out = {"applied": applied, "recorded": recorded, "warned": [str(w.message) for w in caught]}
    if rank == 0:
        run = GradWatch.open(folder / "run")
        out["anomalies"] = [a.kind for a in run.anomalies]
        run.close()
    return out


SCENARIOS = {"hand": _hand_averaged}


def test_data_parallel_by_hand_records_the_averaged_gradient_on_every_rank(tmp_path):
    ranks = launch(__name__, "hand", 2, tmp_path)
    for r in ranks:
        for applied, recorded in zip(r["applied"], r["recorded"]):
            assert recorded == pytest.approx(applied, rel=1e-6)  # float32 store
        assert any("in a way no clipping does" in w for w in r["warned"])
    assert ranks[0]["recorded"] == ranks[1]["recorded"]
    assert "rank_divergence" not in ranks[0]["anomalies"]


def test_an_average_then_a_clipping_records_the_average_before_clipping():
    """`p.grad /= k` then `clip_grad_norm_`: the record held the sum, k x what clipping saw,
    `clipped=True` (an outside check). Once a step has shown the run's k (it only averaged), a
    step that averages and clips records the averaged gradient before clipping."""
    averaged: list[dict[str, float]] = []

    def change(model: nn.Module, opt: object) -> None:
        for p in model.parameters():
            p.grad /= 4
        averaged.append(_applied(model))
        if len(averaged) > 1:  # the first step only averages
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        watch, seen = _loop(mlp(), change, steps=4)
    h = watch.history()
    watch.close()
    assert h[h.step == 0].clipped.tolist() == [False] * 6
    assert h[h.step > 0].clipped.all()
    for k in range(4):
        rows = h[h.step == k].set_index("param")
        for name, norm in averaged[k].items():
            assert rows.loc[name, "norm"] == pytest.approx(norm, rel=1e-6), (k, name)


def test_one_layers_multiplier_is_no_average():
    """`p.grad *= 0.1` on one layer: "every gradient was divided by 10" was said of it."""

    def backbone(model: nn.Module, opt: object) -> None:
        for p in model.fc1.parameters():
            p.grad *= 0.1

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        watch, _ = _loop(mlp(), backbone)
    h = watch.history()
    watch.close()
    assert not any("divided by" in str(w.message) for w in caught)
    assert h.clipped.all()  # read as a clipping of that layer: its norm before the multiplier
