"""One GradScaler over a GAN's two optimizers (PyTorch's AMP recipe for several optimizers):
an Inf in the discriminator's gradients skips its step, and the generator's goes on. The
record said `skipped=True` on every row of that round and the page hatched the whole column;
now only the discriminator's rows read skipped, the column is not hatched, and the NaN/Inf
anomaly says whose step was skipped (on disk and in memory)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from gradviz_widgets import GradWatch
from gradviz_widgets.watch.page import skipped_steps


class GAN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.G = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
        self.D = nn.Sequential(nn.Linear(2, 8), nn.LeakyReLU(0.2), nn.Linear(8, 1))


def _train(path, steps: int = 5, d_inf: int = 2, g_inf: int = 3) -> GradWatch:
    torch.manual_seed(0)
    gan = GAN()
    opt_d = torch.optim.Adam(gan.D.parameters(), lr=1e-3)
    opt_g = torch.optim.Adam(gan.G.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    watch = GradWatch(gan, optimizer=[opt_d, opt_g], scaler=scaler, path=path)
    bce = nn.BCEWithLogitsLoss()
    for it in range(steps):
        real, z = torch.randn(16, 2) + 2, torch.randn(16, 4)
        opt_d.zero_grad()
        ld = bce(gan.D(real), torch.ones(16, 1)) + bce(gan.D(gan.G(z).detach()), torch.zeros(16, 1))
        scaler.scale(ld * (float("inf") if it == d_inf else 1.0)).backward()
        scaler.step(opt_d)
        opt_g.zero_grad()
        lg = bce(gan.D(gan.G(z)), torch.ones(16, 1))
        scaler.scale(lg * (float("inf") if it == g_inf else 1.0)).backward()
        scaler.step(opt_g)
        scaler.update()
    return watch


@pytest.mark.parametrize("on_disk", [True, False], ids=["sqlite", "memory"])
def test_only_the_skipped_optimizers_rows_read_skipped(tmp_path, on_disk: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        watch = _train(tmp_path / "run" if on_disk else None)
        h = watch.history()
    for step, who in ((2, "D."), (3, "G.")):
        rows = h[h.step == step]
        assert rows.skipped.tolist() == rows.param.str.startswith(who).tolist(), rows
    assert not h[~h.step.isin([2, 3])].skipped.any()
    assert skipped_steps(watch) == []  # no column hatched: the other optimizer updated
    said = {a.step: a.detail for a in watch.anomalies if a.kind == "nonfinite"}
    assert "optimizer holding these parameters" in said[2], said
    watch.close()
    if on_disk:
        again = GradWatch.open(tmp_path / "run").history()
        assert again.skipped.tolist() == h.skipped.tolist()


def test_a_round_every_optimizer_skipped_is_skipped_whole(tmp_path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        watch = _train(tmp_path / "run", d_inf=2, g_inf=2)
        h = watch.history()
    assert h[h.step == 2].skipped.all() and not h[h.step != 2].skipped.any()
    assert skipped_steps(watch) == [2]
    watch.close()


def test_a_rounds_scale_is_the_first_optimizers_when_another_was_skipped_before_it(tmp_path):
    """`scaler.update()` after each optimizer's step (Lightning's mixed precision in manual
    optimization): the discriminator's skipped step is recorded at its update, before the
    generator steps at the halved scale, and the round read the discriminator's old scale."""
    torch.manual_seed(0)
    G, D = torch.nn.Linear(4, 6), torch.nn.Linear(6, 1)
    model = torch.nn.ModuleDict({"G": G, "D": D})
    og, od = torch.optim.Adam(G.parameters(), 1e-2), torch.optim.Adam(D.parameters(), 1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    watch = GradWatch(model, optimizer=[og, od], scaler=scaler, path=tmp_path)
    used = []
    for k in range(4):
        x, z = torch.randn(8, 6), torch.randn(8, 4)
        ld = D(x).pow(2).mean() + D(G(z).detach()).pow(2).mean()
        scaler.scale(ld * (float("inf") if k == 2 else 1.0)).backward()
        scaler.step(od)
        scaler.update()
        od.zero_grad()
        used.append(scaler.get_scale())
        scaler.scale((D(G(z)) - 1).pow(2).mean()).backward()
        scaler.step(og)
        scaler.update()
        og.zero_grad()
        od.zero_grad()
    h = watch.history()
    watch.close()
    rows = h[h.param == "G.weight"].set_index("step")
    assert rows.scale.tolist() == used == [1024.0, 1024.0, 512.0, 512.0]
