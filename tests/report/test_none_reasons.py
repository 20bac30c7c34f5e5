"""Why a parameter gets no gradient: one reason per way it can happen."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import FrozenAndDetachedNet, frozen_and_detached_example

CE = nn.CrossEntropyLoss()

# reason kind -> a phrase the reason must contain, and phrases it must not
KINDS = {
    "frozen": ("requires_grad=False",),
    "unused": ("never called",),
    "maybe": ("never called", "branch"),
    "no_grad_branch": ("no_grad",),
    "detached": ("detached",),
}


@pytest.fixture(scope="module")
def not_taken():
    model, x, y = frozen_and_detached_example()
    assert x.sum() <= 0
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    return model, x, y, ex, ex.run()


def test_live_path_is_healthy(not_taken) -> None:
    model, x, y, _, report = not_taken
    assert report.param_status["live.weight"] == "healthy"
    assert report.param_status["live.bias"] == "healthy"
    twin = copy.deepcopy(model)
    CE(twin(x), y).backward()
    assert report.param_norms["live.weight"] == pytest.approx(
        twin.live.weight.grad.double().norm().item(), rel=1e-6
    )


@pytest.mark.parametrize("module", sorted(KINDS))
def test_each_dead_module_has_its_reason(not_taken, module: str) -> None:
    *_, report = not_taken
    for suffix in ("weight", "bias"):
        name = f"{module}.{suffix}"
        assert report.param_status[name] == "none"
        assert report.param_norms[name] is None
        reason = report.none_reasons[name]
        for phrase in KINDS[module]:
            assert phrase in reason, (name, reason)
        # the reason names the module unless it is the frozen one (then the flag says it all)
        if module != "frozen":
            assert f"'{module}'" in reason
        others = {k: v for k, v in KINDS.items() if v[0] not in KINDS[module]}
        for other_phrases in others.values():
            assert other_phrases[0] not in reason, (name, reason)


def test_reasons_cover_exactly_the_none_params(not_taken) -> None:
    *_, report = not_taken
    nones = {n for n, s in report.param_status.items() if s == "none"}
    assert set(report.none_reasons) == nones
    assert nones == {f"{m}.{s}" for m in FrozenAndDetachedNet.REASONS for s in ("weight", "bias")}
    assert report.zero_origins == {}
    text = " ".join(report.findings)
    assert "10 parameters get no gradient" in text


def test_none_params_have_no_graph_nodes(not_taken) -> None:
    *_, ex, _ = not_taken
    ids = {n.id for n in ex.graph.nodes}
    assert "param:live.weight" in ids and "live/AddmmBackward0#0" in ids
    for module in KINDS:
        assert not any(i.startswith((f"{module}/", f"param:{module}.")) for i in ids), module


def test_branch_taken_changes_graph_and_reason(not_taken) -> None:
    model, x, y, ex_not, report_not = not_taken
    x_pos = -x  # all positive: x.sum() > 0, the `maybe` branch runs
    ex_taken = GradExplorer(model, x_pos, loss_fn=CE, target=y)
    report_taken = ex_taken.run()

    assert "maybe/AddmmBackward0#0" not in ex_not.graph
    assert "param:maybe.weight" not in ex_not.graph
    assert "maybe/AddmmBackward0#0" in ex_taken.graph
    assert ex_taken.graph.node("param:maybe.weight").status == "healthy"
    assert ex_not.graph.modules["maybe"].calls == 0
    assert ex_taken.graph.modules["maybe"].calls == 1

    assert "never called" in report_not.none_reasons["maybe.weight"]
    assert "maybe.weight" not in report_taken.none_reasons
    assert report_taken.param_status["maybe.weight"] == "healthy"
    # the other reasons do not depend on the branch
    for m in ("frozen", "detached", "no_grad_branch", "unused"):
        assert report_taken.none_reasons[f"{m}.weight"] == report_not.none_reasons[f"{m}.weight"]


def test_module_called_but_output_unused() -> None:
    class Wasted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.Linear(3, 2)
            self.wasted = nn.Linear(3, 2)

        def forward(self, x):
            self.wasted(x)  # result thrown away
            return self.used(x)

    model = Wasted()
    report = GradExplorer(model, torch.randn(4, 3)).run()
    assert report.param_status["wasted.weight"] == "none"
    reason = report.none_reasons["wasted.weight"]
    assert "'wasted' ran" in reason and "did not feed the loss" in reason


def test_input_requiring_grad_with_all_params_frozen_still_runs() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1)).requires_grad_(False)
    x = torch.randn(2, 3, requires_grad=True)
    report = GradExplorer(model, x).run()
    assert set(report.param_status.values()) == {"none"}
    assert all(r.startswith("requires_grad=False") for r in report.none_reasons.values())
    assert report.input_norms["0"] > 0


class _NoGradForWeight(torch.autograd.Function):
    """x * w whose backward gives w nothing (None)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * w

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return g, None


@pytest.mark.parametrize("through", [False, True])
def test_a_function_that_gives_a_parameter_none_is_named(through: bool) -> None:
    """A custom Function whose backward returns None for a parameter the graph reaches: the
    reason names that Function (it said the result was detached), also where an op lies
    between them (w * 2 fed to the Function)."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.ones(4))
            self.out = nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            w = self.w * 2 if through else self.w
            return self.out(_NoGradForWeight.apply(x, w)).sum()

    report = GradExplorer(M(), torch.randn(3, 4)).report
    assert report.param_status["w"] == "none"
    reason = report.none_reasons["w"]
    assert reason.startswith("reached from the loss, but _NoGradForWeightBackward gave it no")
    assert "detached" not in reason
