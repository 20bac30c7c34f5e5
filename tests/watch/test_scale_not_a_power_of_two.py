"""A GradScaler whose scale is not a power of two (`init_scale=1000.0`, `growth_factor=1.5`):
its unscaled gradient, g x float32(1 / s), differs from the end-of-backward reading divided by s
by float32 rounding. Read as a change, every step of a loop that never clips read
`clipped=True`, with a false warning about an in-place op through `.data`."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.timing import _differ


def hand(model: nn.Module, scale: float) -> dict[str, tuple[float, float]]:
    out = {}
    for n, p in model.named_parameters():
        g = p.grad.detach().double() / scale
        out[n] = (g.norm().item(), g.abs().max().item())
    return out


def amp_loop(given: bool, clip_at: set[int]) -> tuple[list, list, object]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1000.0, growth_factor=1.5, growth_interval=3)
    watch = GradWatch(model, optimizer=opt, scaler=scaler if given else None)
    gen = torch.Generator().manual_seed(1)
    seen = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(12):
            x, y = torch.randn(8, 6, generator=gen), torch.randn(8, 2, generator=gen)
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = nn.functional.mse_loss(model(x).float(), y)
            scaler.scale(loss).backward()
            seen.append(hand(model, scaler.get_scale()))
            if k in clip_at:
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
            scaler.step(opt)
            scaler.update()
    h = watch.history()
    watch.close()
    return seen, [str(w.message) for w in caught], h


@pytest.mark.parametrize("given", [True, False])
def test_a_loop_that_never_clips_reads_not_clipped(given):
    seen, said, h = amp_loop(given, set())
    assert not [m for m in said if "changed" in m], said
    assert any(math.frexp(s)[0] != 0.5 for s in h.scale.unique())  # 1000, 1500, 2250
    assert not h.clipped.fillna(True).any()
    for k, expected in enumerate(seen):
        rows = h[h.step == k].set_index("param")
        for name, (norm, max_abs) in expected.items():
            assert rows.loc[name, "norm"] == pytest.approx(norm, rel=1e-6), (k, name)
            assert rows.loc[name, "max_abs"] == pytest.approx(max_abs, rel=1e-6), (k, name)


def test_clipping_under_such_a_scale_is_still_seen():
    seen, said, h = amp_loop(True, {0, 5, 9})
    assert not [m for m in said if "without a version bump" in m], said
    assert h.groupby("step").clipped.first().tolist() == [k in {0, 5, 9} for k in range(12)]
    for k in (0, 5, 9):  # the pre-clip numbers, unscaled
        rows = h[h.step == k].set_index("param")
        for name, (norm, _) in seen[k].items():
            assert rows.loc[name, "norm"] == pytest.approx(norm, rel=1e-6), (k, name)


@pytest.mark.parametrize("kind", ["numpy", "tensor"])  # tensor: the branch an accelerator takes
def test_a_scaled_comparison_forgives_float32_rounding_only(kind):
    as_kind = torch.as_tensor if kind == "tensor" else np.asarray
    pre = np.array([[1.0, 0.5, 0.0], [2.0, 1.0, 0.25]])
    rounded, clipped, nan = pre * (1 + 2e-7), pre * 0.999, np.where(pre == 1.0, np.nan, pre)
    assert bool(_differ(as_kind(pre), as_kind(rounded)))  # unscaled: exact
    assert not bool(_differ(as_kind(pre), as_kind(rounded), scaled=True))
    assert bool(_differ(as_kind(pre), as_kind(clipped), scaled=True))
    assert bool(_differ(as_kind(pre), as_kind(nan), scaled=True))
