"""Multi-layer perceptrons: a plain one, a vanishing one and a healthy deep one."""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

__all__ = ["ResidualBlock", "ResidualMLP", "mlp3", "relu_residual_mlp", "sigmoid_mlp"]


def mlp3(in_f: int = 784, hidden: int = 256, out: int = 10) -> nn.Sequential:
    """Three Linear layers with ReLUs: ``fc1, relu1, fc2, relu2, fc3``.

    Example:
        >>> mlp3(4, 8, 3)(torch.randn(2, 4)).shape
        torch.Size([2, 3])
    """
    return nn.Sequential(
        OrderedDict(
            [
                ("fc1", nn.Linear(in_f, hidden)),
                ("relu1", nn.ReLU()),
                ("fc2", nn.Linear(hidden, hidden)),
                ("relu2", nn.ReLU()),
                ("fc3", nn.Linear(hidden, out)),
            ]
        )
    )


def sigmoid_mlp(
    depth: int = 48, width: int = 64, in_features: int | None = None, num_classes: int = 10
) -> nn.Sequential:
    """``depth`` x (Linear + Sigmoid) named ``fc0, sig0, ...`` then a ``head`` Linear.

    With default init each layer shrinks the gradient about 10x, so at depth 48
    the first layers' gradients are below 1e-20 (``fc0`` around 1e-42, i.e.
    float32 subnormals; a float32 ``.norm()`` of them underflows to 0.0).
    ``in_features`` defaults to ``width``.

    Example:
        >>> model = sigmoid_mlp(depth=3, width=4)
        >>> model(torch.randn(2, 4)).shape, model.fc0
        (torch.Size([2, 10]), Linear(in_features=4, out_features=4, bias=True))
    """
    layers: list[tuple[str, nn.Module]] = []
    f = width if in_features is None else in_features
    for i in range(depth):
        layers += [(f"fc{i}", nn.Linear(f, width)), (f"sig{i}", nn.Sigmoid())]
        f = width
    layers.append(("head", nn.Linear(f, num_classes)))
    return nn.Sequential(OrderedDict(layers))


class ResidualBlock(nn.Module):
    """Pre-norm residual block: ``x + relu(fc(norm(x)))``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.fc(self.norm(x)))


class ResidualMLP(nn.Module):
    """``stem`` Linear, ``blocks.N`` :class:`ResidualBlock`, final ``norm`` and ``head``.

    Example:
        >>> ResidualMLP(depth=2, width=4, in_features=3)(torch.randn(2, 3)).shape
        torch.Size([2, 10])
    """

    def __init__(
        self, depth: int, width: int, in_features: int | None = None, num_classes: int = 10
    ) -> None:
        super().__init__()
        self.stem = nn.Linear(width if in_features is None else in_features, width)
        self.blocks = nn.ModuleList(ResidualBlock(width) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def relu_residual_mlp(
    depth: int = 48, width: int = 64, in_features: int | None = None, num_classes: int = 10
) -> ResidualMLP:
    """The healthy counterpart of :func:`sigmoid_mlp`: same depth, ReLU + residual + LayerNorm.

    First- and last-layer gradient norms stay within a small factor of each other.

    Example:
        >>> relu_residual_mlp(depth=3, width=4)(torch.randn(2, 4)).shape
        torch.Size([2, 10])
    """
    return ResidualMLP(depth, width, in_features=in_features, num_classes=num_classes)
