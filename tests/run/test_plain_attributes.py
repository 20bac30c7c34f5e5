"""Plain module attributes a forward changes in place, or that hold the module's parameters:
runs leave them as they were and their gradients are those of the model (run/attr_views.py)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer, GradExplorerError


def _reference(model: nn.Module, x: torch.Tensor) -> dict[str, float]:
    names = [n for n, _ in model.named_parameters()]
    grads = torch.autograd.grad(model(x), [p for _, p in model.named_parameters()])
    return {n: g.double().norm().item() for n, g in zip(names, grads)}


class Counting(nn.Module):
    """A tensor counter bumped in place, used by forward: each run must see it at 0."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)
        self.calls = torch.zeros(())
        self.alias = self.calls  # two names, one object
        self.log: list[int] = []
        self.seen: dict[str, int] = {}
        self.groups = [{"scale": torch.ones(1)}]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        self.log.append(1)
        self.seen["k"] = 1
        self.groups[0]["scale"].mul_(2)
        return (self.lin(x) * self.alias * self.groups[0]["scale"]).sum()


def test_in_place_changes_to_plain_attributes_do_not_outlive_the_run() -> None:
    torch.manual_seed(0)
    m, x = Counting(), torch.randn(3, 4)
    calls, groups = m.calls, m.groups
    ex = GradExplorer(m, x)
    first, second = ex.run(), ex.run()
    assert m.calls is calls and m.alias is calls and m.calls.item() == 0
    assert m.log == [] and m.seen == {} and m.groups is groups
    assert m.groups[0]["scale"].item() == 1.0
    assert first.param_norms == second.param_norms
    # each run's forward saw the counter at 1 (both names, one object) and the scale at 2:
    # the bias gradient is 3 rows x 1 x 2
    assert first.param_norms["lin.bias"] == pytest.approx(6.0)


def test_a_hook_fallback_rerun_starts_from_the_same_attributes() -> None:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), Counting())
    x = torch.randn(3, 4)
    ex = GradExplorer(m, x)
    ex.set_hook("0", "backward")
    report = ex.run()
    assert report.param_norms["2.lin.bias"] == pytest.approx(6.0)
    assert m[2].calls.item() == 0


class Decayed(nn.Module):
    """Weight decay on the parameters a set, a list and an id() table on the module pick."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 1)
        self.decay = {self.a.weight, self.b.weight}
        self.no_decay = [self.a.bias]
        self.lr = {id(self.b.bias): 3.0}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.b(self.a(x)).sum()
        for p in self.parameters():
            if p in self.decay and not any(p is q for q in self.no_decay):
                out = out + 0.5 * (p**2).sum()
        return out + self.lr.get(id(self.b.bias), 0.0) * self.b.bias.sum()


def test_parameters_held_in_containers_are_the_runs_stand_ins() -> None:
    torch.manual_seed(0)
    m, x = Decayed(), torch.randn(3, 4)
    decay, lr = m.decay, m.lr
    report = GradExplorer(m, x).run()
    reference = _reference(m, x)
    for name, norm in reference.items():
        assert report.param_norms[name] == pytest.approx(norm, rel=1e-12), name
    assert m.decay is decay and m.a.weight in m.decay and m.lr is lr
    assert list(m.lr) == [id(m.b.bias)]


def test_an_id_table_outside_the_module_is_refused_naming_the_parameter() -> None:
    table: dict[int, float] = {}

    class Outside(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (self.a(x) * table[id(self.a.weight)]).sum()

    m = Outside()
    table[id(m.a.weight)] = 2.0
    with pytest.raises(GradExplorerError) as err:
        GradExplorer(m, torch.randn(3, 4)).run()
    text = str(err.value)
    assert "parameter 'a.weight' (its id())" in text and "stand-in" in text
    assert "sample_input has the shapes" not in text


def test_a_large_container_is_copied_without_looking_inside() -> None:
    from gradviz_widgets.run.attr_views import MAX_ITEMS, RunViews

    t = torch.zeros(1)
    views = RunViews({}, {})
    big = [t] * (MAX_ITEMS + 1)
    copy = views.of(big)
    assert copy == big and copy is not big and copy[0] is t
    small = views.of([t])
    assert small[0] is not t and torch.equal(small[0], t)
