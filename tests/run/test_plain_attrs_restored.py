"""Plain attributes a forward changes are as before after a run: numpy arrays updated in place
get their contents back, and attributes the forward adds or deletes, of any type, are undone
(run/model_state.py)."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from gradviz_widgets import GradExplorer


class Histogram(nn.Module):
    """Counts in numpy arrays, one of them shared with a second module, and uses the counts."""

    def __init__(self, shared: np.ndarray) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.hist = np.zeros(3)
        self.shared = shared
        self.frozen = np.arange(3.0)
        self.frozen.flags.writeable = False
        self.steps = np.int64(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.hist += 1  # in place
        self.shared[0] += 1.0
        self.steps += 1  # a numpy scalar: rebinds the attribute
        scale = torch.as_tensor(self.hist + self.shared[0] + self.frozen, dtype=x.dtype)
        return self.lin(x) * scale * float(self.steps)


def test_numpy_arrays_updated_in_place_get_their_contents_back() -> None:
    torch.manual_seed(0)
    shared = np.array([-0.0, np.nan, 2.0])
    model = nn.Sequential(Histogram(shared), Histogram(shared))
    held = [(m.hist, m.frozen, m.shared) for m in model]
    arrays = {id(a): (a, a.copy()) for m in held for a in m}
    ex = GradExplorer(model, torch.randn(4, 3), loss_fn=torch.sum)
    first, second = ex.run(), ex.run()
    assert first.param_norms == second.param_norms
    now = [(m.hist, m.frozen, m.shared) for m in model]
    assert all(a is b for n, h in zip(now, held) for a, b in zip(n, h))  # the same objects
    assert [m.steps for m in model] == [0, 0]
    for array, before in arrays.values():
        assert array.tobytes() == before.tobytes()  # bitwise: -0.0 and NaN included


class Caching(nn.Module):
    """Leaves new attributes of several types on itself, and deletes one."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.scratch = "kept until forward deletes it"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x)
        self.last_shape = tuple(x.shape)
        self.last_out = out
        self.history = [out.detach()]
        self.stats = np.ones(2)
        self.helper = object()
        del self.scratch
        return out.sum()


def test_attributes_the_forward_adds_or_deletes_are_undone() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), Caching())
    before = dict(vars(model[1]))
    GradExplorer(model, torch.randn(4, 3)).run()
    after = vars(model[1])
    assert after.keys() == before.keys()
    assert all(after[k] is v for k, v in before.items())
    assert model[1].scratch == "kept until forward deletes it"
