"""A change to the model in code makes the newest run stale, and `show()` runs again: showing
the explorer again after freezing a layer, scaling a weight and `model.eval()` displayed the
old run ("all 8 gradients healthy", the old loss) with `ex.stale` False (an outside try-out)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer


def _no_grad(fn, *args):  # noqa: ANN001, ANN202
    with torch.no_grad():
        return fn(*args)


def _net() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3), nn.Dropout(0.1)
    )


CHANGES = {
    "frozen": lambda net, x: net[0].weight.requires_grad_(False),
    "scaled in place": lambda net, x: _no_grad(net[3].weight.mul_, 1e6),
    "optimizer step": lambda net, x: torch.optim.SGD(net.parameters(), 0.1).step(),
    "eval": lambda net, x: net.eval(),
    "replaced": lambda net, x: net.__setitem__(3, nn.Linear(8, 3)),
    "added": lambda net, x: net.append(nn.Tanh()),
    "buffer": lambda net, x: net[1].running_mean.add_(1.0),
    "dropout p": lambda net, x: setattr(net[4], "p", 0.0),
    "input in place": lambda net, x: x.mul_(2.0),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_in_code_makes_the_run_stale(change: str) -> None:
    net, x = _net(), torch.randn(5, 4)
    for p in net.parameters():
        p.grad = torch.ones_like(p)  # the optimizer step has something to apply
    ex = GradExplorer(net, x)
    ex.run()
    assert not ex.stale
    ex.run()
    assert not ex.stale  # a run changes nothing it reads
    CHANGES[change](net, x)
    assert ex.stale
    ex.run()
    assert not ex.stale


def test_a_target_changed_in_place_makes_the_run_stale() -> None:
    net, x, y = _net(), torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    ex.run()
    assert not ex.stale
    y[0] = 2
    assert ex.stale


def test_show_again_after_a_change_shows_a_new_run() -> None:
    net, x = _net(), torch.randn(5, 4)
    ex = GradExplorer(net, x)
    first = ex.show()
    assert first.runs == 1 and ex.report.param_status["0.weight"] == "healthy"
    net[0].weight.requires_grad_(False)
    again = ex.show()
    assert len(ex.history) == 2
    assert ex.report.param_status["0.weight"] == "none"
    assert "0.weight" in again.status_text
    assert ex.show() is not None and len(ex.history) == 2  # nothing changed: no run
