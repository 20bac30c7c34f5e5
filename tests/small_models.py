"""A tiny named MLP and its data, shared by the hook and modifier tests."""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

CE = nn.CrossEntropyLoss()


def mlp() -> nn.Sequential:
    """fc1 -> tanh -> fc2 -> relu -> fc3, seeded."""
    torch.manual_seed(0)
    return nn.Sequential(
        OrderedDict(
            [
                ("fc1", nn.Linear(4, 6)),
                ("act1", nn.Tanh()),
                ("fc2", nn.Linear(6, 5)),
                ("act2", nn.ReLU()),
                ("fc3", nn.Linear(5, 3)),
            ]
        )
    )


def data(n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """n inputs of width 4 and class targets in 0..2, from a fixed generator."""
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)


#: The seed's gradient-norm table for the dead-branch network (CrossEntropyLoss, seed 0),
#: rounded to 4 places: what plain `loss.backward()` and the explorer must both give.
SEED_TABLE = {
    "main1.weight": 0.279,
    "main1.bias": 0.1172,
    "gate.weight": 0.0,
    "gate.bias": 0.0,
    "dead.weight": 0.0,
    "dead.bias": 0.1547,
    "main2.weight": 0.2938,
    "main2.bias": 0.1547,
}
