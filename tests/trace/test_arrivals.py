"""Large parameter gradients are measured as they reach their parameter and then let go
(trace/arrivals.py): the run never holds a second set of them beside the model's `.grad`, and
every number stays what a plain `.backward()` puts in `.grad`."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.stats.norms import NormBatch

REL = 1e-12


class Mixed(nn.Module):
    """Large and small parameters on every path: a conv weight (one edge), Linear weights
    (through `t()`), a tied embedding and head (summed), a sparse embedding (kept as is)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(6_000, 16)
        self.bag = nn.Embedding(5_000, 16, sparse=True)
        self.conv = nn.Conv1d(16, 96, 3, padding=1)
        self.mix = nn.Linear(96, 96)
        self.out = nn.Linear(96, 16)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.emb(tokens) + self.bag(tokens)
        h = torch.relu(self.conv(h.transpose(1, 2))).transpose(1, 2)
        h = self.out(torch.tanh(self.mix(h)))
        return h @ self.emb.weight.t()  # the head tied to the embedding


def _loss(out: torch.Tensor) -> torch.Tensor:
    return out.square().mean()


def _reference(model: nn.Module, tokens: torch.Tensor) -> dict[str, tuple[float, float, float]]:
    """name -> (norm, max |g|, zero fraction) of `.grad` after a plain backward, in float64."""
    _loss(model(tokens)).backward()
    out = {}
    for name, p in model.named_parameters():
        g = p.grad.to_dense() if p.grad.is_sparse else p.grad
        d = g.double()
        zero = 1.0 - int(torch.count_nonzero(d)) / d.numel()
        out[name] = (d.norm().item(), d.abs().max().item(), zero)
    return out


@pytest.mark.parametrize("track_flow", [True, False])
def test_large_gradients_are_let_go_as_they_arrive(
    track_flow: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What autograd.grad hands back for a large (dense) parameter holds one element: the
    gradient itself was measured on arrival and freed. The numbers match a plain backward."""
    torch.manual_seed(0)
    model, tokens = Mixed(), torch.randint(0, 5_000, (2, 12))
    returned: list[torch.Tensor | None] = []
    inner = torch.autograd.grad

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        grads = inner(*args, **kwargs)
        returned.extend(grads)
        return grads

    monkeypatch.setattr(torch.autograd, "grad", spy)
    report = GradExplorer(model, tokens, loss_fn=_loss, track_flow=track_flow).run()
    monkeypatch.undo()
    large = [g for g in returned if g is not None and g.numel() > NormBatch.SMALL]
    dense = [g for g in large if not g.is_sparse]
    assert len(dense) == 3 and len(large) == 4  # emb (tied), conv, mix: dense; bag: sparse
    assert all(g.untyped_storage().nbytes() <= g.element_size() for g in dense)
    for name, (norm, top, zero) in _reference(model, tokens).items():
        record = next(r for r in report.params if r.name == name)
        assert record.norm == pytest.approx(norm, rel=REL), name
        assert record.max_abs == top and record.zero_fraction == pytest.approx(zero), name


def test_measuring_on_arrival_leaves_the_model_as_it_was() -> None:
    """The hooks go on the run's stand-ins: the model's parameters keep their identity, their
    `.grad` and their (absent) hook dicts."""
    torch.manual_seed(0)
    model, tokens = Mixed(), torch.randint(0, 5_000, (2, 12))
    _loss(model(tokens)).backward()
    before = {n: (p, p.grad.clone(), p._backward_hooks) for n, p in model.named_parameters()}
    GradExplorer(model, tokens, loss_fn=_loss).run()
    for name, p in model.named_parameters():
        same, grad, hooks = before[name]
        assert p is same and p._backward_hooks is hooks, name
        assert torch.equal(p.grad.to_dense(), grad.to_dense()), name


class _Shared(torch.autograd.Function):
    """Hands its input and its weight one gradient tensor (both are 96 x 96)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        ctx.save_for_backward(x)
        return x @ w

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ANN001
        (x,) = ctx.saved_tensors
        shared = x.t() @ g
        return shared, shared


class _TripleInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        return x.clone()

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
        return g.mul_(3.0)  # edits what it received: the weight's gradient too


class EditedLater(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(96, 96)
        self.w = nn.Parameter(torch.randn(96, 96) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(_Shared.apply(_TripleInPlace.apply(self.inp(x)), self.w))


def test_a_gradient_edited_after_it_arrived_is_reported_as_it_arrived() -> None:
    """A later node edits the weight's gradient in place (it is also the input's): the run
    reports what `.backward()` copied into `.grad` when it arrived, not the edited tensor
    `torch.autograd.grad` would hand back."""
    torch.manual_seed(0)
    model, x = EditedLater(), torch.randn(96, 96)
    report = GradExplorer(model, x, loss_fn=_loss).run()
    _loss(model(x)).backward()
    edited, _ = torch.autograd.grad(_loss(model(x)), [model.w, model.inp.weight])
    arrived = model.w.grad.double()
    assert edited.double().norm().item() == pytest.approx(3 * arrived.norm().item(), rel=1e-6)
    record = next(r for r in report.params if r.name == "w")
    assert record.norm == pytest.approx(arrived.norm().item(), rel=REL)
    assert record.max_abs == arrived.abs().max().item()
