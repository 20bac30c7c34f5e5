"""The snapshot helper itself: it must see every kind of change it claims to see."""

from __future__ import annotations

import random

import numpy as np
import torch
import torch.nn.utils.parametrize as parametrize
from torch import nn
from torch.nn.utils import parametrizations

from .state import bits, diff, optimizer_problems, snapshot


class Owner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.bn = nn.BatchNorm1d(3)
        self.gen = torch.Generator().manual_seed(0)
        self.cached = torch.zeros(2)


def _changes(mutate) -> list[str]:
    torch.manual_seed(0)
    model = Owner()
    before = snapshot(model)
    mutate(model)
    return diff(before, snapshot(model))


def test_nan_values_compare_equal_to_themselves() -> None:
    t = torch.tensor([float("nan"), 1.0])
    assert bits(t) == bits(t.clone())
    assert bits(torch.tensor([0.0])) != bits(torch.tensor([-0.0]))  # bitwise, not ==
    assert _changes(lambda m: None) == []


def _replace_weight(m):
    m.lin.weight = nn.Parameter(m.lin.weight.detach().clone())


def _bump_version(m):
    with torch.no_grad():
        m.lin.weight.add_(0)  # same bits, but written in place


def _hook(m):
    m.lin.register_forward_hook(lambda *a: None)


def test_every_kind_of_change_is_seen() -> None:
    mutations = {
        "version": _bump_version,
        "value": lambda m: m.lin.weight.data.mul_(2),
        "replaced": _replace_weight,
        "grad": lambda m: setattr(m.lin.weight, "grad", torch.zeros(3, 3)),
        "buffer": lambda m: m.bn.running_mean.add_(1),
        "flag": lambda m: m.lin.bias.requires_grad_(False),
        "mode": lambda m: m.eval(),
        "hook": _hook,
        "generator": lambda m: torch.rand(1, generator=m.gen),
        "attr": lambda m: setattr(m, "cached", torch.zeros(2)),
        "python attr": lambda m: setattr(m.lin, "in_features", 4),
        "grad mode": lambda m: torch.set_grad_enabled(False),
        "torch rng": lambda m: torch.rand(1),
        "numpy rng": lambda m: np.random.rand(),
        "python rng": lambda m: random.random(),
    }
    for what, mutate in mutations.items():
        with torch.enable_grad():
            assert _changes(mutate), f"a {what} change went unseen"


def test_parametrize_cache_changes_are_seen() -> None:
    model = parametrizations.orthogonal(nn.Linear(3, 3))
    with parametrize.cached():
        before = snapshot(model)
        _ = model.weight  # fills the cache
        assert diff(before, snapshot(model))


def test_optimizer_check() -> None:
    model = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert optimizer_problems(opt, model) == []
    model.weight = nn.Parameter(model.weight.detach().clone())
    assert optimizer_problems(opt, model)
