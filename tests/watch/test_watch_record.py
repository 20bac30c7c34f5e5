"""GradWatch records, per step, the numbers a hand-written loop reads from p.grad."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from model_state import assert_unchanged, model_state
from small_models import CE, data, mlp
from torch import nn

from gradviz_widgets.vocabulary import Thresholds, classify
from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.reduce import SMALL, grad_stats


def hand(model: nn.Module) -> dict[str, tuple]:
    """What a user's loop would read from p.grad (float64, exact)."""
    out = {}
    for n, p in model.named_parameters():
        if p.grad is None:
            out[n] = (None, None, None)
        else:
            g = p.grad.detach().double()
            top = g.abs().max().item()
            # scaled by a power of two near max |g|: g.norm() underflows to 0.0 below ~1e-154
            s = 2.0 ** -math.frexp(top)[1] if top else 1.0
            out[n] = ((g * s).norm().item() / s, top, (g == 0).double().mean().item())
    return out


def check(history, step: int, expected: dict[str, tuple], th: Thresholds | None = None) -> None:
    th = th or Thresholds()
    rows = history[history.step == step].set_index("param")
    assert set(rows.index) == set(expected), (sorted(rows.index), sorted(expected))
    for name, (norm, top, zf) in expected.items():
        r = rows.loc[name]
        assert r.status == classify(norm, top, th), name
        if norm is None:
            assert math.isnan(r.norm) and r.status == "none"
            continue
        assert r.norm == pytest.approx(norm, rel=1e-6, abs=0), name
        assert r.max_abs == pytest.approx(top, rel=1e-6, abs=0), name
        assert r.zero_fraction == pytest.approx(zf, abs=2e-5), name


def test_adam_steps_match_hand_loop(tmp_path):
    model, (x, y) = mlp(), data()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    seen = []
    for _ in range(5):
        opt.zero_grad()
        CE(model(x), y).backward()
        seen.append(hand(model))
        opt.step()
    h = watch.history()
    assert sorted(h.step.unique()) == list(range(5))
    for k, expected in enumerate(seen):
        check(h, k, expected)
    watch.close()


def test_accumulation_is_one_step_and_update_ratio(tmp_path):
    model, (x, y) = mlp(), data(12)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", update_ratio=True)
    seen, ratios = [], []
    for _ in range(3):
        opt.zero_grad()
        for part in range(3):  # three micro-batches, one optimizer step
            CE(model(x[part::3]), y[part::3]).backward()
        seen.append(hand(model))
        before = {n: p.detach().double().clone() for n, p in model.named_parameters()}
        opt.step()
        ratios.append(
            {
                n: ((p.detach().double() - before[n]).norm() / before[n].norm()).item()
                for n, p in model.named_parameters()
            }
        )
    h = watch.history()
    assert h.step.nunique() == 3
    for k in range(3):
        check(h, k, seen[k])
        rows = h[h.step == k].set_index("param")
        for n, r in ratios[k].items():
            assert rows.loc[n].update_ratio == pytest.approx(r, rel=1e-5)
    watch.close()


def test_without_optimizer_one_record_per_backward(tmp_path):
    model, (x, y) = mlp(), data()
    model.fc3.weight.requires_grad_(False)
    watch = GradWatch(model, path=tmp_path / "run")
    seen = []
    for _ in range(3):  # no zero_grad: p.grad accumulates, and so do the records
        CE(model(x), y).backward()
        seen.append(hand(model))  # the frozen fc3.weight too: None (reason "frozen")
    h = watch.history()
    assert h.step.nunique() == 3 and h.update_ratio.isna().all()
    for k in range(3):
        check(h, k, seen[k])
    assert set(h[h.param == "fc3.weight"].reason) == {"frozen"}
    watch.close()


def test_none_zero_and_large_tensors(tmp_path):
    torch.manual_seed(0)
    big = nn.Linear(1100, 1000)  # 1.1M elements: the per-tensor CPU path
    assert big.weight.numel() > SMALL
    unused = nn.Linear(3, 3)
    model = nn.ModuleDict({"big": big, "unused": unused})
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    x = torch.randn(4, 1100)
    opt.zero_grad()
    torch.relu(big(x)).sum().backward()
    expected = hand(model)
    opt.step()
    h = watch.history()
    check(h, 0, expected)
    assert h.set_index("param").loc["unused.weight"].status == "none"
    watch.close()


@pytest.mark.parametrize("scale", [1e-30, 1e-200])
def test_vanishing_gradients_never_read_zero(tmp_path, scale):
    model = mlp().double()
    x, y = data()
    watch = GradWatch(model, path=tmp_path / "run")
    (CE(model(x.double()), y) * scale).backward()
    h = watch.history()
    expected = hand(model)
    assert all(n > 0 for n, _, _ in expected.values() if n)
    check(h, 0, expected)
    watch.close()
    check(GradWatch.open(tmp_path / "run").history(), 0, expected)


def test_reduce_paths_agree():
    torch.manual_seed(0)
    ts = [
        torch.randn(2000, 700) * 1e-3,
        torch.zeros(5),
        torch.tensor([float("nan"), 1.0]),
        torch.randn(3, 3, dtype=torch.float64) * 1e-300,
        torch.randn(0),
    ]
    small = grad_stats([t[:10] if t.dim() == 2 else t for t in ts])
    large = grad_stats(ts)
    ref = [
        (
            t.double().norm().item(),
            t.double().abs().max().item() if t.numel() else 0.0,
            float((t != 0).sum()),
        )
        for t in ts
    ]
    for (n, m, z), row in zip(ref, large):
        assert np.allclose(row, [n, m, z], rtol=1e-9, equal_nan=True)
    assert np.isnan(small[2, 0]) and small[1].tolist() == [0.0, 0.0, 0.0]


def test_closing_leaves_the_model_as_it_was(tmp_path):
    model, (x, y) = mlp(), data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model_state(model)
    opt_hooks = (dict(opt._optimizer_step_pre_hooks), dict(opt._optimizer_step_post_hooks))
    GradWatch(model, optimizer=opt, path=tmp_path / "a").close()
    GradWatch(model, path=tmp_path / "b").close()
    assert_unchanged(model, before)
    assert (dict(opt._optimizer_step_pre_hooks), dict(opt._optimizer_step_post_hooks)) == opt_hooks
    assert all(p._post_accumulate_grad_hooks is None for p in model.parameters())
    # after training too: the hook dicts are what they were
    watch = GradWatch(model, path=tmp_path / "c")
    CE(model(x), y).backward()
    watch.close()
    assert all(p._post_accumulate_grad_hooks is None for p in model.parameters())
    assert model_state(model)["hooks"] == before["hooks"]


def _ratios_by_hand(model, opt, x, steps, *, loss=None):
    """Train `steps` steps; the exact ‖Δp‖/‖p‖ of each, computed in float64 by hand."""
    out = []
    for _ in range(steps):
        opt.zero_grad()
        (loss(model(x)) if loss else model(x).square().mean()).backward()
        before = {n: p.detach().double().clone() for n, p in model.named_parameters()}
        opt.step()
        out.append(
            {
                n: ((p.detach().double() - before[n]).norm() / before[n].norm()).item()
                for n, p in model.named_parameters()
            }
        )
    return out


@pytest.mark.parametrize("every", [1, 3])
def test_update_ratios_of_a_large_model_are_exact(tmp_path, every):
    # > SMALL elements: the persistent-buffer (foreach) path and the blocked norms
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1100, 1000), nn.ReLU(), nn.Linear(1000, 7))
    assert sum(p.numel() for p in model.parameters()) > SMALL
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", update_ratio=every)
    ratios = _ratios_by_hand(model, opt, torch.randn(8, 1100), 5)
    h = watch.history()
    for k, expected in enumerate(ratios):
        rows = h[h.step == k].set_index("param")
        for n, r in expected.items():
            if k % every:
                assert math.isnan(rows.loc[n].update_ratio)
            else:
                assert rows.loc[n].update_ratio == pytest.approx(r, rel=1e-5), (k, n)
    watch.close()


def test_update_ratio_every_n_steps_on_the_small_path(tmp_path):
    model, (x, _) = mlp(), data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", update_ratio=2)
    ratios = _ratios_by_hand(model, opt, x, 5)
    h = watch.history()
    assert h[h.step % 2 == 1].update_ratio.isna().all()
    for k in (0, 2, 4):
        rows = h[h.step == k].set_index("param")
        for n, r in ratios[k].items():
            assert rows.loc[n].update_ratio == pytest.approx(r, rel=1e-5), (k, n)
    watch.close()


def test_large_path_low_precision_and_odd_sizes():
    torch.manual_seed(0)
    ts = [
        torch.randn(1 << 20).half(),
        torch.randn(1_048_583),
        torch.randn(3001, 7) * 1e-30,
        torch.randn(700, 1500).bfloat16(),
        torch.full((5,), float("inf")),
    ]
    stats = grad_stats(ts)
    for t, row in zip(ts, stats):
        d = t.double()
        ref = [d.norm().item(), d.abs().max().item(), float((d != 0).sum())]
        assert np.allclose(row, ref, rtol=1e-12, equal_nan=True), (t.dtype, t.shape, row, ref)


def test_an_lm_heads_gradient_is_recorded_to_float32_storage(tmp_path):
    """A cross-entropy head over 50,000 classes: its weight's gradient (3.2M elements, a few
    large rows among tiny ones) read to the stored float32's rounding, every seed (float32
    norms of 1,024-element blocks were 1.3e-7 to 2.3e-7 low: a stranger's try-out)."""
    for seed in range(3):
        torch.manual_seed(seed)
        head = nn.Linear(64, 50_000)
        opt = torch.optim.SGD(head.parameters(), 1e-3)
        watch = GradWatch(head, optimizer=opt, path=tmp_path / f"run{seed}")
        x, y = torch.randn(256, 64), torch.randint(0, 50_000, (256,))
        opt.zero_grad()
        nn.functional.cross_entropy(head(x), y).backward()
        ref = {n: p.grad.double().norm().item() for n, p in head.named_parameters()}
        opt.step()
        watch.close()
        rows = watch.history().set_index("param")
        for name, norm in ref.items():
            assert abs(rows.loc[name].norm / norm - 1) <= 2**-24, (seed, name)


def test_update_ratio_default_is_every_tenth_step(tmp_path):
    model, (x, _) = mlp(), data()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run")
    ratios = _ratios_by_hand(model, opt, x, 12)
    h = watch.history()
    assert sorted(h[h.update_ratio.notna()].step.unique()) == [0, 10]
    rows = h[h.step == 10].set_index("param")
    for n, r in ratios[10].items():
        assert rows.loc[n].update_ratio == pytest.approx(r, rel=1e-5)
    watch.close()
