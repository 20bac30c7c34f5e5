"""A four-layer net with one branch whose weights never receive gradient."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["DeadBranchNet", "dead_branch_example"]


class DeadBranchNet(nn.Module):
    """Two parallel branches; the ``gate -> dead`` branch is dead on arrival.

    ``gate`` has zero weight and bias ``-1``, so ``relu(gate(x))`` is all zeros:
    ``gate.*`` and ``dead.weight`` get exactly zero gradient while ``dead.bias``
    still learns (its gradient is the loss gradient summed over the batch).

    Example:
        >>> net = DeadBranchNet()
        >>> net(torch.randn(2, 4)).shape
        torch.Size([2, 3])
    """

    def __init__(self) -> None:
        super().__init__()
        self.main1 = nn.Linear(4, 8)
        self.gate = nn.Linear(4, 4)
        self.dead = nn.Linear(4, 3)
        self.main2 = nn.Linear(8, 3)
        with torch.no_grad():
            self.gate.weight.zero_()
            self.gate.bias.fill_(-1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        main = torch.relu(self.main1(x))
        dead = self.dead(torch.relu(self.gate(x)))
        return self.main2(main) + dead


def dead_branch_example() -> tuple[DeadBranchNet, torch.Tensor, torch.Tensor]:
    """Return ``(model, x, y)`` for the dead-branch lesson.

    Calls ``torch.manual_seed(0)`` (resetting the global RNG), then builds the
    net, then draws ``x`` of shape ``(6, 4)``; ``y`` holds 6 class labels in 0..2.

    Example:
        >>> net, x, y = dead_branch_example()
        >>> nn.CrossEntropyLoss()(net(x), y).backward()
        >>> round(net.main1.weight.grad.norm().item(), 4), net.dead.weight.grad.norm().item()
        (0.279, 0.0)
    """
    torch.manual_seed(0)
    net = DeadBranchNet()
    x = torch.randn(6, 4)
    y = torch.tensor([0, 1, 2, 1, 0, 2])
    return net, x, y
