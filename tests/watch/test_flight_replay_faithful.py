"""A replay (`anomaly.explore()`) runs the step as it ran, or its report says how it cannot:
a model left in eval mode after training was replayed in eval mode (other numbers, said
nowhere); a forward that changed its batch in place was replayed on the changed batch; and a
step its GradScaler skipped was replayed unscaled, finite and healthy, without a word."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from gradviz_widgets import GradWatch, Thresholds


class Net(nn.Module):
    def __init__(self, in_place: bool = False) -> None:
        super().__init__()
        self.in_place = in_place
        self.f = nn.Sequential(
            nn.Linear(10, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1)
        )

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.in_place:
            x.sub_(3).mul_(2)
        return (self.f(x) - y).pow(2).mean()


def _exploding_at(net: Net, tmp_path, step: int = 6) -> tuple[GradWatch, dict]:
    opt = torch.optim.SGD(net.parameters(), 1e-3)
    watch = GradWatch(net, optimizer=opt, path=tmp_path, thresholds=Thresholds(exploding=50.0))
    g = torch.Generator().manual_seed(1)
    for k in range(step + 2):
        x = torch.randn(16, 10, generator=g)
        y = torch.randn(16, 1, generator=g) * (100 if k == step else 1)
        opt.zero_grad()
        net(x, y).backward()
        opt.step()
    (a,) = [a for a in watch.anomalies if a.kind == "exploding"]
    h = watch.history()
    return watch, {r.param: r.norm for r in h[h.step == a.step].itertuples()}


def test_a_model_in_eval_mode_after_training_is_replayed_in_the_steps_modes(tmp_path):
    torch.manual_seed(0)
    net = Net()
    watch, recorded = _exploding_at(net, tmp_path)
    net.eval()  # a validation pass after training
    (a,) = [a for a in watch.anomalies if a.kind == "exploding"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = a.explore()
    assert ex.report.param_norms == pytest.approx(recorded, rel=1e-6)  # float32 store
    assert not net.training and all(not m.training for m in net.modules())
    watch.close()


def test_a_forward_that_changes_its_batch_in_place_is_said_in_the_replay(tmp_path):
    torch.manual_seed(0)
    watch, _ = _exploding_at(Net(in_place=True), tmp_path)
    (a,) = [a for a in watch.anomalies if a.kind == "exploding"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = a.explore()
    assert any("changed its input in place" in f for f in ex.report.findings)
    watch.close()


def test_a_step_the_grad_scaler_skipped_says_its_replay_is_unscaled(tmp_path):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(net.parameters(), 1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)

    def loss(out: torch.Tensor) -> torch.Tensor:
        return out.float().pow(2).mean()

    watch = GradWatch(net, optimizer=opt, scaler=scaler, path=tmp_path, loss_fn=loss)
    g = torch.Generator().manual_seed(1)
    for k in range(6):
        x = torch.randn(16, 10, generator=g) * (100 if k == 4 else 1)
        with torch.autocast("cpu", dtype=torch.float16):
            out = net(x)
        opt.zero_grad()
        scaler.scale(loss(out)).backward()
        scaler.step(opt)
        scaler.update()
    (a,) = [a for a in watch.anomalies if a.kind == "nonfinite"]
    assert a.step == 4
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ex = a.explore()
    said = [f for f in ex.report.findings if "skipped by its GradScaler" in f]
    assert said and "scaled by 1024" in said[0]
    watch.close()
