"""Small broken promises (issue 9 item 8): the model, its generators, parametrizations and the
garbage collector bitwise as before; numbers equal to a plain backward."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from model_state import assert_unchanged, model_state
from test_engine_trust import (
    CE,
    assert_norms_match,
    explore_and_check,
    images,
    l2_loss,
    plain_norms,
    small_cnn,
)
from torch import nn
from torch.nn.utils import parametrize

from gradviz_widgets import GradExplorer


def test_nan_in_both_runs_is_not_marked_modified() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    x = torch.randn(2, 3)
    x[0, 0] = math.nan
    ex = GradExplorer(model, x)
    ex.set_modifier("1", scale=0.5)
    report = ex.run()
    assert report.param_status["0.weight"] == "nonfinite"
    assert report.param("0.weight").modified_by is None


class OwnGenerator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.gen = torch.Generator().manual_seed(7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.rand(x.shape, generator=self.gen, device=x.device) > 0.5
        return self.lin(x * mask)


def test_generator_owned_by_the_model_is_not_advanced() -> None:
    torch.manual_seed(0)
    model = OwnGenerator()
    x = torch.randn(6, 4)
    reference = plain_norms(model, lambda m: m(x).sum())
    _, report = explore_and_check(model, x, runs=3)
    assert_norms_match(report, reference)  # the copy's generator starts where the model's is


def test_complex_input_gradient_is_reported() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    z = torch.randn(3, 4, dtype=torch.complex64, requires_grad=True)

    def loss(out: torch.Tensor) -> torch.Tensor:
        return out.abs().pow(2).sum()

    class Wrap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = model

        def forward(self, z: torch.Tensor) -> torch.Tensor:
            return z.real @ self.lin.weight.t() + 1j * (z.imag @ self.lin.weight.t())

    wrapped = Wrap()
    _, report = explore_and_check(wrapped, z, loss)
    z2 = z.detach().clone().requires_grad_(True)
    loss(wrapped(z2)).backward()
    assert report.input_norms["0"] == pytest.approx(
        torch.linalg.vector_norm(z2.grad).item(), rel=1e-5
    )


@pytest.mark.parametrize("kind", ["weight_norm", "spectral_norm"])
def test_legacy_weight_and_spectral_norm(kind: str) -> None:
    def build() -> nn.Module:
        torch.manual_seed(0)
        wrap = getattr(torch.nn.utils, kind)
        model = nn.Sequential(wrap(nn.Linear(4, 5)), nn.Tanh(), nn.Linear(5, 3)).train()
        model(torch.ones(2, 4))  # the user's own forward: weight is a tensor from their params
        return model

    model = build()
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    reference = plain_norms(model, lambda m: CE(m(x), y), twin=build())
    _, report = explore_and_check(model, x, CE, y)
    assert_norms_match(report, reference)


def test_parametrize_cached_block() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 3))
    parametrize.register_parametrization(model[0], "weight", _Symmetric())
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    reference = plain_norms(model, lambda m: CE(m(x), y))
    with parametrize.cached():
        model[0].weight  # noqa: B018 - the user's cached weight, made from the real parameter
        _, report = explore_and_check(model, x, CE, y)  # the cache is checked as well
    assert_norms_match(report, reference)


class _Symmetric(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w.triu() + w.triu(1).transpose(-1, -2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_penalty_list_weight_and_own_generator() -> None:
    model, (x, y) = small_cnn().cuda(), images()
    x, y = x.cuda(), y.cuda()
    reference = plain_norms(model, lambda m: l2_loss(list(m.parameters()))(m(x), y))
    _, report = explore_and_check(model, x, l2_loss(list(model.parameters())), y)
    assert_norms_match(report, reference, rel=1e-4)
    torch.manual_seed(0)
    own = OwnGenerator().cuda()
    own.gen = torch.Generator(device="cuda").manual_seed(7)
    xs = torch.randn(6, 4, device="cuda")
    reference = plain_norms(own, lambda m: m(xs).sum())
    _, report = explore_and_check(own, xs, runs=2)
    assert_norms_match(report, reference, rel=1e-4)


def test_embedding_with_max_norm_does_not_renormalise_the_users_weight() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(10, 4, max_norm=1.0), nn.Flatten(), nn.Linear(12, 3))
    model[0].weight.data.mul_(5)  # rows far above max_norm
    ids, y = torch.tensor([[1, 2, 3], [4, 5, 1]]), torch.tensor([0, 2])
    reference = plain_norms(model, lambda m: CE(m(ids), y))
    _, report = explore_and_check(model, ids, CE, y)
    assert_norms_match(report, reference)
    said = [f for f in report.notes if "0.weight: nn.Embedding(max_norm=...)" in f]
    assert len(said) == 1 and "the run used a copy" in said[0], report.notes


class ClampsItsWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 2)
        with torch.no_grad():
            self.lin.weight.mul_(40.0)  # so that the clamp changes something

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.lin.weight.data.clamp_(-1.0, 1.0)  # weight clipping, through .data
        try:
            return self.lin(x)
        except Exception:  # a forward that swallows errors must not swallow our signal
            raise


@pytest.mark.parametrize("device_run", [None, "cpu"])
def test_in_place_write_to_a_weight_never_reaches_the_model(device_run: str | None) -> None:
    torch.manual_seed(0)
    model, x = ClampsItsWeight(), torch.randn(3, 4)
    twin = copy.deepcopy(model)
    twin(x).sum().backward()
    before = model_state(model)
    report = GradExplorer(model, x, device=device_run).run()
    assert_unchanged(model, before)  # values and _version of lin.weight too
    assert model.lin.weight.abs().max() > 1.0
    assert any("writes into lin.weight in place" in f and "copy" in f for f in report.notes)
    ref = twin.lin.weight.grad.double().norm().item()
    assert math.isclose(report.param_norms["lin.weight"], ref, rel_tol=1e-6)


def test_garbage_collector_state_is_put_back() -> None:
    """The run pauses the cyclic collector; afterwards it is as the user left it."""
    import gc

    model, x = nn.Linear(3, 1), torch.randn(2, 3)
    assert gc.isenabled()
    GradExplorer(model, x).run()
    assert gc.isenabled()
    gc.disable()
    try:
        GradExplorer(model, x).run()
        assert not gc.isenabled()
    finally:
        gc.enable()
