"""A parameter added mid-run (a new module and `opt.add_param_group`) must not be scored
against another series' history: the baselines were one array [parameters..., modules...],
so the new parameter took over the first module's warm baseline (an outside tester's run
reported "step 60: started in extra.weight (gradient norm, up to 1.36e+03x its baseline)"
at the step it appeared) and every module was scored against its neighbour's."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from gradviz_widgets import GradWatch
from gradviz_widgets.watch.baselines import NormSeries, SpikeRule


def test_a_new_parameter_starts_cold_and_the_modules_keep_their_own() -> None:
    series = NormSeries(SpikeRule())
    for _ in range(30):
        series.step(np.array([1e-3, 1.0]), ["a.w", "b.w"])
    score, spike, _ = series.step(np.array([1e-3, 1.0, 1.0]), ["a.w", "b.w", "c.w"])
    # [a.w, b.w, c.w, module a, module b, module c]
    assert series.modules == ["a", "b", "c"]
    assert np.isnan(score[2]) and not spike.any()
    assert abs(score[3]) < 1e-9 and abs(score[4]) < 1e-9  # each module against its own
    assert np.isnan(score[5])


def test_a_module_that_gains_a_parameter_learns_anew() -> None:
    series = NormSeries(SpikeRule())
    for _ in range(30):
        series.step(np.array([1e-3, 1.0]), ["a.w", "b.w"])
    score, spike, _ = series.step(np.array([1e-3, 1.0, 50.0]), ["a.w", "b.w", "a.extra"])
    assert series.regrouped.tolist() == [0]  # module a: its norm now holds a.extra too
    assert np.isnan(score[3]) and not spike.any()
    assert abs(score[4]) < 1e-9


class Grows(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.c = nn.Linear(8, 8), nn.Linear(8, 2)
        self.extra: nn.Module | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x) * 1e-3 + x.detach()  # module a's gradients ~1e-3 of the others'
        if self.extra is not None:
            h = h + self.extra(h)
        return self.c(h)


def test_a_module_added_mid_run_is_no_spike(tmp_path) -> None:  # noqa: ANN001
    torch.manual_seed(0)
    model = Grows()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", update_ratio=True)
    g = torch.Generator().manual_seed(1)
    for step in range(120):
        if step == 60:
            model.extra = nn.Linear(8, 8)
            opt.add_param_group({"params": list(model.extra.parameters())})
        x, y = torch.randn(32, 8, generator=g), torch.randint(0, 2, (32,), generator=g)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        watch.log_loss(loss)
        opt.step()
    watch.close()
    assert watch.spikes == []
    assert not [a for a in watch.anomalies if a.kind == "spike"]
    history = watch.history()
    assert history[history.param == "extra.weight"].step.min() == 60
