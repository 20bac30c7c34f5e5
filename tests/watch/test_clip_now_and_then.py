"""Clipping on some steps only (`if k % 4 == 3: clip_grad_value_(...)`, a clip after warm-up,
a clip when the norm looks high), or on one optimizer of two (a GAN's critic): once the watch
has seen one in-place change it reads every backward, so each later clipped step keeps its
pre-clip norms and reads `clipped=True`, even after unclipped steps or the other optimizer's
step in between (they had turned that reading off again: every later clipped step silently held
the clipped numbers, `clipped=<NA>`)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from small_models import CE, data, mlp

from gradviz_widgets.watch import GradWatch


def hand(model: torch.nn.Module) -> dict[str, tuple[float, float]]:
    out = {}
    for n, p in model.named_parameters():
        g = p.grad.detach().double()
        out[n] = (g.norm().item(), g.abs().max().item())
    return out


def train(model: torch.nn.Module, steps: int, clip_at: set[int], seen: list) -> None:
    opt = torch.optim.SGD(model.parameters(), 0.1)
    x, y = data()
    watch = GradWatch(model, optimizer=opt) if seen is not None else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the first clipped step's "changed in place" warning
        for k in range(steps):
            opt.zero_grad()
            CE(model(x), y).backward()
            if watch is not None:
                seen.append(hand(model))
            if k in clip_at:
                torch.nn.utils.clip_grad_value_(model.parameters(), 1e-3)
            opt.step()
    if watch is not None:
        seen.append(watch.history())
        watch.close()


@pytest.mark.parametrize("clip_at", [{3, 7, 11}, {2, 3, 9}])
def test_each_clipped_step_after_the_first_keeps_its_pre_clip_norms(clip_at):
    model = mlp()
    twin = copy.deepcopy(model)
    seen: list = []
    train(model, 12, clip_at, seen)
    train(twin, 12, clip_at, None)  # type: ignore[arg-type]
    for p, q in zip(model.parameters(), twin.parameters()):
        assert torch.equal(p, q)
    h = seen.pop()
    flags = h.groupby("step").clipped.first()
    first = min(clip_at)
    assert flags.isna().tolist() == [k == first for k in range(12)]
    assert flags.fillna(False).tolist() == [k in clip_at and k != first for k in range(12)]
    for k, expected in enumerate(seen):
        if k == first:
            continue  # holds what the optimizer applied, as documented and warned
        rows = h[h.step == k].set_index("param")
        for name, (norm, max_abs) in expected.items():
            assert rows.loc[name, "norm"] == pytest.approx(norm, rel=1e-6), (k, name)
            assert rows.loc[name, "max_abs"] == pytest.approx(max_abs, rel=1e-6), (k, name)


def test_a_gan_clipping_one_optimizer_keeps_its_pre_clip_norms_every_round():
    torch.manual_seed(0)
    gen = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    disc = torch.nn.Sequential(torch.nn.Linear(2, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    gan = torch.nn.ModuleDict({"g": gen, "d": disc})
    opt_g = torch.optim.Adam(gen.parameters(), 1e-3)
    opt_d = torch.optim.Adam(disc.parameters(), 1e-3)
    watch = GradWatch(gan, optimizer=[opt_g, opt_d])
    bce, rng, seen = torch.nn.BCEWithLogitsLoss(), torch.Generator().manual_seed(0), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(6):
            real, z = torch.randn(16, 2, generator=rng) + 2, torch.randn(16, 4, generator=rng)
            opt_d.zero_grad()
            fake = gen(z).detach()
            (bce(disc(real), torch.ones(16, 1)) + bce(disc(fake), torch.zeros(16, 1))).backward()
            seen.append({"d." + n: v for n, v in hand(disc).items()})
            torch.nn.utils.clip_grad_norm_(disc.parameters(), 0.01)  # the critic only
            opt_d.step()
            opt_g.zero_grad()
            bce(disc(gen(z)), torch.ones(16, 1)).backward()
            opt_g.step()  # its read, unchanged, had turned the end-of-backward reading off
    h = watch.history()
    watch.close()
    d_rows = h[h.param.str.startswith("d.")]
    assert d_rows.clipped.notna().all() and d_rows.clipped.all()
    for k, expected in enumerate(seen):
        rows = h[h.step == k].set_index("param")
        for name, (norm, max_abs) in expected.items():
            assert rows.loc[name, "norm"] == pytest.approx(norm, rel=1e-6), (k, name)
            assert rows.loc[name, "max_abs"] == pytest.approx(max_abs, rel=1e-6), (k, name)
