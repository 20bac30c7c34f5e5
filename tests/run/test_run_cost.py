"""What one run costs in Python per module, counted (never timed: performance is shown by
benchmarks/): the module tree is walked a fixed number of times per run, whatever the depth (it
used to be walked ~10 times, plus a generator per module for its children and parameters), and
a batch of small gradients is queued without the per-tensor path. Results stay the same."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from torch import nn

import gradviz_widgets.stats.norms as stats
from gradviz_widgets import capture
from gradviz_widgets.run.model_state import ModelIndex

WALKS = ("named_modules", "named_children", "named_parameters", "named_buffers", "modules")


def chain(layers: int) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(8, 8) for _ in range(layers)])


def count_walks(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Calls of torch's module-tree walks made from outside (a walk's own recursion into
    submodules passes `memo` and is not counted)."""
    calls: Counter[str] = Counter()
    for name in WALKS:
        real = getattr(nn.Module, name)

        def wrapper(self: nn.Module, *args: Any, _real: Any = real, _name: str = name, **kw: Any):  # noqa: ANN202
            if not (args and isinstance(args[0], set)) and "memo" not in kw:
                calls[_name] += 1
            return _real(self, *args, **kw)

        monkeypatch.setattr(nn.Module, name, wrapper)
    return calls


def test_module_tree_walked_a_fixed_number_of_times(monkeypatch: pytest.MonkeyPatch) -> None:
    counts = []
    for layers in (4, 40):
        model, x = chain(layers), torch.randn(2, 8)
        calls = count_walks(monkeypatch)
        capture(model, x)
        counts.append(sum(calls.values()))
        monkeypatch.undo()
    assert counts[0] == counts[1], f"walks per run grow with the depth: {counts}"
    # ModelIndex: named_modules + named_parameters (itself a named_modules); the rest are the
    # checks at the door (checks.py, devices.py)
    assert counts[1] <= 10, counts


def test_model_index_matches_torch() -> None:
    shared = nn.Linear(2, 2)
    model = nn.Sequential(shared, nn.Sequential(shared, nn.BatchNorm1d(2)), nn.Linear(2, 2))
    model[2].weight = shared.weight  # tied
    model.register_buffer("nothing", None)
    index = ModelIndex.of(model)
    assert list(index.modules) == list(model.named_modules())
    assert list(index.all_modules) == list(model.named_modules(remove_duplicate=False))
    assert list(index.params) == list(model.named_parameters())
    assert [id(b) for b in index.buffers()] == [id(b) for b in model.buffers()]
    assert index.canonical["2.weight"] == "0.weight"


def test_small_batches_take_one_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hook's batch of small CPU gradients: one copy into the pending buffer, no per-tensor
    reduction, the same numbers."""
    batch = stats.NormBatch(torch.device("cpu"))
    reduced = [0]
    real = stats.norms_and_maxes

    def counting(*args: Any, **kwargs: Any) -> Any:
        reduced[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(stats, "norms_and_maxes", counting)
    grads = [torch.tensor([3.0, 4.0]), torch.ones(3, 2).t(), torch.zeros(1)]
    slots = batch.add(grads)
    assert slots == [0, 2, 4] and reduced[0] == 0
    values = batch.resolve()
    assert [batch.pair(values, s) for s in slots] == [(5.0, 4.0), (6**0.5, 1.0), (0.0, 0.0)]
