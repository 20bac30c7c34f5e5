"""Deliberately broken models: exploding gradients, NaN mid-graph, missing gradients."""

from __future__ import annotations

from collections import OrderedDict
from typing import Literal

import torch
from torch import nn

__all__ = [
    "FrozenAndDetachedNet",
    "NaNMidGraphNet",
    "UnsafeNorm",
    "UnsafeSqrt",
    "exploding_example",
    "exploding_mlp",
    "frozen_and_detached_example",
    "nan_mid_graph_example",
    "nan_mid_graph_net",
]


def exploding_mlp(depth: int = 24, width: int = 64, gain: float = 4.0) -> nn.Sequential:
    """``depth`` x (Linear + ReLU) (``fc0, relu0, ...``) + ``head``, hidden weights times ``gain``.

    Each layer multiplies the gradient by about ``0.4 * gain``; with the
    defaults ``fc0.weight`` gets a gradient norm above 1e4 under cross-entropy
    (see :func:`exploding_example`), while the forward pass stays finite.

    Example:
        >>> exploding_mlp(depth=2, width=4)(torch.randn(2, 4)).shape
        torch.Size([2, 10])
    """
    layers: list[tuple[str, nn.Module]] = []
    for i in range(depth):
        fc = nn.Linear(width, width)
        with torch.no_grad():
            fc.weight.mul_(gain)
        layers += [(f"fc{i}", fc), (f"relu{i}", nn.ReLU())]
    layers.append(("head", nn.Linear(width, 10)))
    return nn.Sequential(OrderedDict(layers))


def exploding_example() -> tuple[nn.Sequential, torch.Tensor, torch.Tensor]:
    """Return ``(model, x, y)``: default :func:`exploding_mlp`, ``x`` ``(32, 64)``, 10 classes.

    Calls ``torch.manual_seed(0)`` first (resetting the global RNG).

    Example:
        >>> model, x, y = exploding_example()
        >>> nn.CrossEntropyLoss()(model(x), y).backward()
        >>> model.fc0.weight.grad.norm().item() > 1e4
        True
    """
    torch.manual_seed(0)
    model = exploding_mlp()
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))
    return model, x, y


class UnsafeSqrt(nn.Module):
    """``sqrt(x)``: NaN in the forward pass wherever ``x < 0``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(x)


class UnsafeNorm(nn.Module):
    """Hand-written L2 norm ``sqrt(sum(x*x))``: finite forward, NaN gradient at a zero row.

    At ``x == 0`` the sqrt backward gives ``inf`` and ``2*x*inf`` is ``0*inf = NaN``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt((x * x).sum(-1, keepdim=True))


class NaNMidGraphNet(nn.Module):
    """``fc1`` (no bias) -> ``unsafe`` -> ``head``; the NaN starts in ``unsafe``.

    ``kind="backward"`` (default): ``unsafe`` is :class:`UnsafeNorm` and the head
    sees ``cat([h, norm(h)])``. The forward pass and the loss are finite, but an
    all-zero input row makes ``unsafe``'s backward emit NaN, which reaches
    ``fc1.weight.grad``; ``head`` grads stay finite.
    ``kind="forward"``: ``unsafe`` is :class:`UnsafeSqrt` of ``fc1``'s output,
    so its forward output is NaN wherever ``fc1(x) < 0`` (``fc1``'s output is
    finite) and the loss and every gradient are NaN.

    Example:
        >>> NaNMidGraphNet(kind="forward").unsafe
        UnsafeSqrt()
    """

    def __init__(
        self,
        kind: Literal["backward", "forward"] = "backward",
        in_features: int = 8,
        hidden: int = 16,
        num_classes: int = 3,
    ) -> None:
        super().__init__()
        if kind not in ("backward", "forward"):
            raise ValueError(f"kind must be 'backward' or 'forward', got {kind!r}")
        self.kind = kind
        self.fc1 = nn.Linear(in_features, hidden, bias=False)
        self.unsafe: nn.Module = UnsafeNorm() if kind == "backward" else UnsafeSqrt()
        head_in = hidden + 1 if kind == "backward" else hidden
        self.head = nn.Linear(head_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        if self.kind == "backward":
            return self.head(torch.cat([h, self.unsafe(h)], dim=-1))
        return self.head(self.unsafe(h))


def nan_mid_graph_net(kind: Literal["backward", "forward"] = "backward") -> NaNMidGraphNet:
    """Build a :class:`NaNMidGraphNet` (8 inputs, 16 hidden, 3 classes).

    Example:
        >>> nan_mid_graph_net().unsafe
        UnsafeNorm()
    """
    return NaNMidGraphNet(kind=kind)


def nan_mid_graph_example(
    kind: Literal["backward", "forward"] = "backward",
) -> tuple[NaNMidGraphNet, torch.Tensor, torch.Tensor]:
    """Return ``(model, x, y)`` with ``x`` ``(4, 8)`` whose row 1 is all zeros.

    Calls ``torch.manual_seed(0)`` first (resetting the global RNG).

    Example:
        >>> model, x, y = nan_mid_graph_example()
        >>> loss = nn.CrossEntropyLoss()(model(x), y)
        >>> loss.isfinite().item()
        True
        >>> loss.backward()
        >>> model.fc1.weight.grad.isnan().any().item(), model.head.weight.grad.isfinite().all().item()
        (True, True)
    """
    torch.manual_seed(0)
    model = nan_mid_graph_net(kind)
    x = torch.randn(4, 8)
    x[1] = 0.0
    y = torch.tensor([0, 1, 2, 0])
    return model, x, y


class FrozenAndDetachedNet(nn.Module):
    """One Linear(4, 3) per reason a parameter ends up with ``.grad is None``.

    Output = ``live(x) + frozen(x) + detached(x).detach() + no_grad_branch(x)``
    (the last computed under ``torch.no_grad()``), plus ``maybe(x)`` only when
    ``x.sum() > 0``; ``unused`` is never called. :attr:`REASONS` maps each
    submodule name to its reason; ``live`` is the only one that gets gradients
    for inputs with ``x.sum() <= 0`` (see :func:`frozen_and_detached_example`).

    Example:
        >>> sorted(FrozenAndDetachedNet.REASONS)
        ['detached', 'frozen', 'maybe', 'no_grad_branch', 'unused']
    """

    REASONS: dict[str, str] = {
        "frozen": "requires_grad=False",
        "detached": "output used through .detach()",
        "no_grad_branch": "called under torch.no_grad()",
        "unused": "defined but never called",
        "maybe": "data-dependent branch not taken (x.sum() <= 0)",
    }

    def __init__(self) -> None:
        super().__init__()
        self.live = nn.Linear(4, 3)
        self.frozen = nn.Linear(4, 3)
        self.frozen.requires_grad_(False)
        self.detached = nn.Linear(4, 3)
        self.no_grad_branch = nn.Linear(4, 3)
        self.unused = nn.Linear(4, 3)
        self.maybe = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.live(x) + self.frozen(x) + self.detached(x).detach()
        with torch.no_grad():
            side = self.no_grad_branch(x)
        out = out + side
        if x.sum() > 0:
            out = out + self.maybe(x)
        return out


def frozen_and_detached_example() -> tuple[FrozenAndDetachedNet, torch.Tensor, torch.Tensor]:
    """Return ``(model, x, y)``; ``x`` ``(5, 4)`` is all negative so ``maybe`` is skipped.

    Calls ``torch.manual_seed(0)`` first (resetting the global RNG).

    Example:
        >>> model, x, y = frozen_and_detached_example()
        >>> nn.CrossEntropyLoss()(model(x), y).backward()
        >>> model.live.weight.grad is not None, model.maybe.weight.grad is None
        (True, True)
    """
    torch.manual_seed(0)
    model = FrozenAndDetachedNet()
    x = -torch.rand(5, 4) - 0.1
    y = torch.tensor([0, 1, 2, 1, 0])
    return model, x, y
