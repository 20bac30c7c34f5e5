"""Generators a model holds inside lists, tuples, dicts and helper objects, not directly as module
attributes: runs neither advance them nor depend on the run before (run/rng.py)."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import gradviz_widgets.run.rng as rng
from gradviz_widgets import GradExplorer


class Noise:
    """An augmentation helper holding the generators (a plain object, not a module)."""

    def __init__(self, seed: int) -> None:
        self.g = torch.Generator().manual_seed(seed)
        self.numpy = np.random.default_rng(seed)
        self.legacy = np.random.RandomState(seed)
        self.python = random.Random(seed)


class Slotted:
    __slots__ = ("g", "unset")

    def __init__(self, seed: int) -> None:
        self.g = torch.Generator().manual_seed(seed)


class Noisy(nn.Module):
    """Draws from one generator, reached by `draw` from wherever the module keeps it."""

    def __init__(self, draw: Callable[[Noisy], float]) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.draw = draw
        self.in_list = [torch.Generator().manual_seed(1)]
        self.in_tuple = (0, random.Random(2))
        self.in_dict = {"noise": np.random.default_rng(3)}
        self.helper = Noise(4)
        self.slotted = Slotted(5)
        self.nested = {"stages": [Noise(6)]}
        self.nested["self"] = self.nested  # a cycle: the search must end

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.draw(self)


DRAWS: dict[str, Callable[[Noisy], float]] = {
    "list": lambda m: torch.rand((), generator=m.in_list[0]).item(),
    "tuple": lambda m: m.in_tuple[1].random(),
    "dict": lambda m: float(m.in_dict["noise"].random()),
    "helper torch": lambda m: torch.rand((), generator=m.helper.g).item(),
    "helper numpy": lambda m: float(m.helper.numpy.random()),
    "helper RandomState": lambda m: float(m.helper.legacy.rand()),
    "helper random": lambda m: m.helper.python.random(),
    "slots": lambda m: torch.rand((), generator=m.slotted.g).item(),
    "nested": lambda m: torch.rand((), generator=m.nested["stages"][0].g).item(),
}


@pytest.mark.parametrize("where", list(DRAWS))
def test_a_generator_held_inside_an_attribute_is_not_advanced(where: str) -> None:
    torch.manual_seed(0)
    model, x = Noisy(DRAWS[where]), torch.randn(3, 4)
    ex = GradExplorer(model, x, loss_fn=torch.sum)
    first, second = ex.run(), ex.run()
    assert first.param_norms == second.param_norms
    # the model draws next what it would have drawn had there been no run
    fresh = Noisy(DRAWS[where])
    assert DRAWS[where](model) == DRAWS[where](fresh)


def test_a_generator_shared_by_two_modules_is_set_back_once() -> None:
    shared = Noise(0)
    first, second = Noisy(DRAWS["helper torch"]), Noisy(DRAWS["helper torch"])
    first.helper = second.helper = shared
    model = nn.Sequential(first, second)
    before = shared.g.get_state()
    torch.manual_seed(0)
    GradExplorer(model, torch.randn(3, 4), loss_fn=torch.sum).run()
    assert torch.equal(shared.g.get_state(), before)
    owned = rng.OwnedGenerators()
    for module in (first, second):
        owned.search(module.helper)
        owned.search([module.helper.g])
    assert len(owned) == 4  # the torch, numpy, RandomState and Python generators of `shared`


#: what RandNaN's forwards drew (outside the model: a list attribute is put back after a run)
DRAWN: list[float] = []


class RandNaN(nn.Module):
    """Takes the log (NaN) or the exp (Inf) branch as its list-held generator draws."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.gens = [torch.Generator().manual_seed(0)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        r = float(torch.rand((), generator=self.gens[0]))
        DRAWN.append(r)
        h = self.a(x)
        return (torch.log(h) if r < 0.5 else torch.exp(h * 1000)).sum()


def test_the_nonfinite_rerun_replays_the_draws_of_a_list_held_generator() -> None:
    torch.manual_seed(0)
    ex = GradExplorer(RandNaN(), torch.randn(5, 4), loss_fn=lambda o: o)
    first_draw = float(torch.rand((), generator=torch.Generator().manual_seed(0)))
    assert first_draw < 0.5  # the seed takes the log branch
    DRAWN.clear()
    origins = [ex.run().nonfinite_origin for _ in range(2)]
    # the forward and the rerun that looks for the first NaN/Inf draw alike, on both runs
    assert len(DRAWN) == 4 and set(DRAWN) == {first_draw}
    assert origins == ["LogBackward0#0"] * 2


class Vocabulary(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.table = [(i, str(i)) for i in range(size)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).sum()


def test_a_big_container_is_not_searched(monkeypatch: pytest.MonkeyPatch) -> None:
    looked = [0]
    real = rng.owned_state

    def counted(value: Any) -> Any:
        looked[0] += 1
        return real(value)

    monkeypatch.setattr(rng, "owned_state", counted)
    GradExplorer(Vocabulary(100_000), torch.randn(2, 4)).run()
    big = looked[0]
    looked[0] = 0
    GradExplorer(Vocabulary(100), torch.randn(2, 4)).run()
    assert big <= rng.SEARCH_ITEMS < 100_000
    assert looked[0] >= 100  # a small one is looked into
