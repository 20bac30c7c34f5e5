"""Sharpness-aware minimisation (SAM, ASAM): an optimizer wrapping a base optimizer that
shares its param_groups. Its step perturbs the weights (w + e), takes a second gradient there,
puts w back and has the base optimizer apply that gradient. The record holds each update as
the base optimizer made it: the second gradient, and ‖Δp‖/‖p‖ from the weights the step began
with (it measured from the perturbed ones, and warned that the base optimizer's steps were not
recorded; a `first_step` / `second_step` loop recorded no step at all)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn

from gradviz_widgets import GradWatch


class Sam(torch.optim.Optimizer):
    """SAM as the common implementations write it: the base optimizer shares param_groups."""

    def __init__(self, params: Any, base: type, rho: float = 0.05, **kwargs: Any) -> None:
        super().__init__(params, {"rho": rho, **kwargs})
        self.base_optimizer = base(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def first_step(self) -> None:
        grads = [p.grad for g in self.param_groups for p in g["params"] if p.grad is not None]
        scale = self.param_groups[0]["rho"] / (
            torch.stack([g.norm() for g in grads]).norm() + 1e-12
        )
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.state[p]["old_p"] = p.data.clone()
                    p.add_(p.grad * scale)
        self.zero_grad()

    @torch.no_grad()
    def second_step(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data = self.state[p]["old_p"]
        self.base_optimizer.step()

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        self.first_step()
        torch.enable_grad()(closure)()
        self.second_step()


@pytest.mark.parametrize("loop", ["closure", "split"])
def test_sam_records_each_base_update_from_the_start_weights(tmp_path, loop: str) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    opt = Sam(model.parameters(), torch.optim.Adam, lr=1e-2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        watch = GradWatch(model, optimizer=opt, path=tmp_path / "run", update_ratio=1)
        x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
        expected = []
        second: list[torch.Tensor] = []  # the gradients of the newest closure call

        def closure() -> torch.Tensor:
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            second[:] = [p.grad.double().clone() for p in model.parameters()]
            return loss

        for _ in range(4):
            start = [p.detach().clone() for p in model.parameters()]
            opt.zero_grad()
            closure()
            if loop == "closure":
                opt.step(closure)
            else:
                opt.first_step()
                closure()
                opt.second_step()
            expected.append(
                [
                    (g.norm().item(), ((p.double() - s.double()).norm() / s.double().norm()).item())
                    for g, p, s in zip(second, model.parameters(), start)
                ]
            )
    h = watch.history()
    assert watch.steps == 4 and len(h) == 16
    for step, rows in enumerate(expected):
        got = h[h.step == step]
        for (norm, ratio), (_, row) in zip(rows, got.iterrows()):
            assert row.norm == pytest.approx(norm, rel=1e-6)
            assert row.update_ratio == pytest.approx(ratio, rel=1e-6)
    watch.close()
