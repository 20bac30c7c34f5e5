"""`anomaly.explore()` replays a step with the parameters frozen then as frozen, even when they
were unfrozen later (the replay had given a frozen weight an exploding gradient)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from gradviz_widgets import GradWatch, Thresholds


def mse(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).mean()


def train(path: Path) -> tuple[nn.Module, GradWatch]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    model[0].weight.requires_grad_(False)
    opt = torch.optim.SGD([model[0].bias, model[2].weight, model[2].bias], lr=0.1)
    watch = GradWatch(model, optimizer=opt, path=path, thresholds=Thresholds(exploding=5.0))
    for i in range(12):
        if i == 10:  # unfrozen after the anomaly
            model[0].weight.requires_grad_(True)
            opt.add_param_group({"params": [model[0].weight]})
        x = torch.randn(16, 8) * (30 if i == 3 else 1)
        opt.zero_grad()
        mse(model(x)).backward()
        opt.step()
    return model, watch


def test_a_parameter_frozen_at_the_step_is_frozen_in_its_replay(tmp_path: Path) -> None:
    model, watch = train(tmp_path)
    first = watch.anomalies[0]
    assert first.step == 3 and first.kind == "exploding"
    recorded = watch.history().query("step == 3").set_index("param")
    assert recorded.loc["0.weight", "status"] == "none"
    for anomaly in (first, GradWatch.open(tmp_path).anomalies[0]):
        ex = anomaly.explore(model, loss_fn=mse)
        assert ex.report.param_status["0.weight"] == "none"
        assert "0.weight" in ex.report.none_reasons
        norms = ex.report.param_norms
        for name in ("0.bias", "2.weight", "2.bias"):
            assert abs(norms[name] - recorded.loc[name, "norm"]) <= 1e-5 * norms[name]
    assert model[0].weight.requires_grad  # the user's model is as they left it
    watch.close()
