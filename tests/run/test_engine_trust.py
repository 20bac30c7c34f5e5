"""Numbers equal to a plain backward, and the model bitwise as before, for models that reach
their parameters in unusual ways (issue 9 items 3 and 8). The helpers here are shared with
test_shared_modules.py, test_wrapped_models.py and test_argument_checks.py."""

from __future__ import annotations

import copy
import types
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


class ClosureWeights(ListWeights):
    """The same weight reached through an object of its own: the run does not look inside it,
    so forward uses the parameter itself."""

    def __init__(self) -> None:
        super().__init__()
        self.ws = ()
        self.holder = types.SimpleNamespace(weight=self.lin.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(x @ self.holder.weight.t() + self.lin.bias)
        return self.out(h) + self.lin(x).sum(-1, keepdim=True)


@pytest.mark.parametrize("model_class", [ListWeights, ClosureWeights])
def test_weight_used_through_a_plain_list(model_class: type[nn.Module]) -> None:
    torch.manual_seed(0)
    model = model_class()
    x, y = torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    reference = plain_norms(model, lambda m: CE(m(x), y))
    _, report = explore_and_check(model, x, CE, y)
    assert_norms_match(report, reference)
    # a list on the module holds the run's stand-in (run/attr_views.py); the object the weight
    noted = any("also used directly" in f and "lin.weight" in f for f in report.notes)
    assert noted == (model_class is ClosureWeights)


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
