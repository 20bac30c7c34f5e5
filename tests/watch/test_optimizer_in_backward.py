"""PyTorch's "optimizer step in backward" recipe: a per-parameter optimizer stepped, and its
gradient dropped, in a post-accumulate-grad hook. A watch without an optimizer (one record per
backward) read every row as "none" with a false `none` anomaly: the gradients were gone by the
end of backward. The watch's hook now runs first and reads such gradients as they arrive."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from gradviz_widgets.watch import GradWatch


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def _train(model: nn.Module, watch_first: bool | None, set_to_none: bool = True):
    """Three steps of the recipe; the watch made before or after the hooks (None: no watch).
    Returns the watch and the norm each step applied, per parameter name."""
    opts = {p: torch.optim.Adam([p], lr=1e-2) for p in model.parameters()}
    names = {p: n for n, p in model.named_parameters()}
    applied: list[dict[str, float]] = []

    def step_now(p: torch.Tensor) -> None:
        applied[-1][names[p]] = float(p.grad.double().norm())
        opts[p].step()
        opts[p].zero_grad(set_to_none=set_to_none)

    watch = GradWatch(model) if watch_first else None
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)
    if watch_first is False:
        watch = GradWatch(model)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        applied.append({})
        x, y = torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)
        nn.functional.mse_loss(model(x), y).backward()
    return watch, applied


@pytest.mark.parametrize("watch_first", [True, False])
@pytest.mark.parametrize("set_to_none", [True, False])
def test_each_backward_records_the_gradients_the_hooks_applied(watch_first, set_to_none):
    model = _model()
    twin = copy.deepcopy(model)
    watch, applied = _train(model, watch_first, set_to_none)
    _train(twin, None, set_to_none)
    h = watch.history()  # type: ignore[union-attr]
    watch.close()  # type: ignore[union-attr]
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), twin.parameters()))
    assert sorted(set(h.step)) == [0, 1, 2]
    assert (h.status == "healthy").all(), h[["step", "param", "status", "reason"]]
    for k, norms in enumerate(applied):
        rows = h[h.step == k].set_index("param")
        for name, norm in norms.items():
            assert rows.loc[name, "norm"] == pytest.approx(norm, rel=1e-6)  # float32 store
    assert watch.anomalies == []  # type: ignore[union-attr]


def test_the_watch_hook_runs_first_and_leaves_the_users_order():
    model = _model()
    p = model[0].weight
    order: list[str] = []
    p.register_post_accumulate_grad_hook(lambda t: order.append("a"))
    watch = GradWatch(model)
    p.register_post_accumulate_grad_hook(lambda t: order.append("b"))
    model(torch.randn(2, 4)).sum().backward()
    assert order == ["a", "b"]
    assert len(p._post_accumulate_grad_hooks) == 3
    watch.close()
    assert len(p._post_accumulate_grad_hooks) == 2
