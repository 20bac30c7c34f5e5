"""Numbers equal to a plain backward, and the model bitwise as before, for models that reach
their parameters in unusual ways (issue 9 items 3 and 8). The helpers here are shared with
test_shared_modules.py, test_wrapped_models.py and test_argument_checks.py."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from model_state import assert_unchanged, model_state
from torch import nn
from torch.nn.utils import parametrize
from torch.utils.checkpoint import checkpoint

from gradviz_widgets import GradExplorer

CE = nn.CrossEntropyLoss()


# ---- helpers ---------------------------------------------------------------------------------
def full_state(model: nn.Module) -> dict:
    """model_state plus what it leaves out: every name of every buffer, plain tensor
    attributes by identity, the state of generators the model owns, the parametrize cache and
    the global RNG."""
    state = model_state(model)
    state["all_buffers"] = [(n, b) for n, b in model.named_buffers(remove_duplicate=False)]
    state["tensor_attrs"] = {
        (path, k): v
        for path, m in model.named_modules()
        for k, v in vars(m).items()
        if isinstance(v, torch.Tensor)
    }
    state["generators"] = {
        (path, k): (g, g.get_state())
        for path, m in model.named_modules()
        for k, g in vars(m).items()
        if isinstance(g, torch.Generator)
    }
    state["cache"] = dict(parametrize._cache)
    state["rng"] = torch.get_rng_state()
    return state


def assert_same_state(model: nn.Module, before: dict) -> None:
    assert_unchanged(model, before)
    after = full_state(model)
    assert len(after["all_buffers"]) == len(before["all_buffers"])
    for (name, b), (name2, b2) in zip(before["all_buffers"], after["all_buffers"]):
        assert name == name2 and b is b2, f"buffer {name} replaced"
    assert after["tensor_attrs"].keys() == before["tensor_attrs"].keys()
    for key, t in before["tensor_attrs"].items():
        assert after["tensor_attrs"][key] is t, f"tensor attribute {key} replaced"
    for key, (g, state) in before["generators"].items():
        assert after["generators"][key][0] is g
        assert torch.equal(g.get_state(), state), f"generator {key} advanced"
    assert after["cache"].keys() == before["cache"].keys()
    assert all(after["cache"][k] is v for k, v in before["cache"].items())
    assert torch.equal(torch.get_rng_state(), before["rng"])


def plain_norms(
    model: nn.Module, run: Callable[[nn.Module], torch.Tensor], twin: nn.Module | None = None
) -> dict[str, float]:
    """Float64 norms of `.grad` after a plain backward of `run(copy)` on a deep copy (or on
    `twin`, for models deepcopy refuses), per parameter name (as named_parameters() gives it);
    None where .grad stays None."""
    twin = copy.deepcopy(model) if twin is None else twin
    for p in twin.parameters():
        p.grad = None
    torch.manual_seed(0)
    run(twin).backward()
    return {
        n: None if p.grad is None else torch.linalg.vector_norm(p.grad.double()).item()
        for n, p in twin.named_parameters()
    }


def assert_norms_match(
    report: Any, reference: dict[str, float | None], rel: float = 1e-5, abs_tol: float = 1e-12
) -> None:
    assert set(report.param_norms) == set(reference)
    for name, want in reference.items():
        got = report.param_norms[name]
        if want is None:
            assert got is None, f"{name}: got {got}, plain backward gives no gradient"
        else:
            assert got == pytest.approx(want, rel=rel, abs=abs_tol), name


def explore_and_check(
    model: nn.Module,
    x: Any,
    loss_fn: Callable | None = None,
    target: Any = None,
    runs: int = 2,
    device: str | None = None,
) -> tuple[GradExplorer, Any]:
    """Explore with a full state snapshot checked after the runs and after close()."""
    before = full_state(model)
    ex = GradExplorer(model, x, loss_fn=loss_fn, target=target, device=device)
    report = None
    for _ in range(runs):
        report = ex.run()
    assert_same_state(model, before)
    ex.close()
    assert_same_state(model, before)
    return ex, report


def small_cnn() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(4, 3),
    )


def images(n: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 3, (n,), generator=g)


# ---- item 3: parameters reached other than through module attributes -------------------------
def l2_loss(params: list[torch.Tensor]) -> Callable:
    return lambda out, y: CE(out, y) + 1e-2 * sum((p**2).sum() for p in params)


@pytest.mark.parametrize("source", ["parameters", "optimizer"])
def test_l2_penalty_over_captured_parameters_counts(source: str) -> None:
    model, (x, y) = small_cnn(), images()

    def params_of(m: nn.Module) -> list[torch.Tensor]:
        if source == "parameters":
            return list(m.parameters())
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        return [p for group in opt.param_groups for p in group["params"]]

    reference = plain_norms(model, lambda m: l2_loss(params_of(m))(m(x), y))
    _, report = explore_and_check(model, x, l2_loss(params_of(model)), y)
    assert_norms_match(report, reference)
    # dropping the penalty's part would read visibly different numbers
    without = plain_norms(model, lambda m: CE(m(x), y))
    assert max(abs(report.param_norms[n] / w - 1) for n, w in without.items()) > 0.05


class ListWeights(nn.Module):
    """A weight used through a plain Python list built in __init__."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.out = nn.Linear(4, 3)
        self.ws = [self.lin.weight]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x @ self.ws[0].t() + self.lin.bias)
        return self.out(h) + self.lin(x).sum(-1, keepdim=True)


def test_weight_used_through_a_plain_list() -> None:
    torch.manual_seed(0)
    model = ListWeights()
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    reference = plain_norms(model, lambda m: CE(m(x), y))
    _, report = explore_and_check(model, x, CE, y)
    assert_norms_match(report, reference)
    assert any("also used directly" in f and "lin.weight" in f for f in report.findings)


def test_weight_used_through_a_plain_list_is_one_graph_node() -> None:
    torch.manual_seed(0)
    model = ListWeights()
    ex = GradExplorer(model, torch.randn(5, 4))
    ids = [n.id for n in ex.graph.nodes]
    assert ids.count("param:lin.weight") == 1 and ids.count("acc:param:lin.weight") == 1


class CheckpointedList(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.head = nn.Linear(4, 3)
        self.ws = [self.lin.weight]

    def block(self, h: torch.Tensor) -> torch.Tensor:
        return torch.relu(h @ self.ws[0].t() + self.lin.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(checkpoint(self.block, x, use_reentrant=True))


def test_reentrant_checkpoint_with_list_weight_leaves_grad_alone() -> None:
    torch.manual_seed(0)
    model = CheckpointedList()
    x = torch.randn(5, 4, requires_grad=True)
    y = torch.tensor([0, 1, 2, 0, 1])
    CE(model(x), y).backward()  # the user's .grad, mid-training
    model.head.bias.grad = None
    reference = plain_norms(model, lambda m: CE(m(x), y))
    _, report = explore_and_check(model, x, CE, y)
    assert_norms_match(report, reference)
    assert report.param_norms["lin.weight"] > 0


# ---- item 8: small broken promises ------------------------------------------------------------
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
    assert any("writes into lin.weight in place" in f and "copy" in f for f in report.findings)
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
