"""Recurrent models: an LSTM cell unrolled in Python, and ``nn.LSTM`` for comparison."""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["LSTMClassifier", "UnrolledLSTM", "lstm_model"]


class UnrolledLSTM(nn.Module):
    """One ``nn.LSTMCell`` (``cell``) called ``steps`` times, then a ``head`` Linear.

    The same module appears ``steps`` times in the autograd graph, which is the
    point of the example. Input ``(batch, steps, input_size)``; output
    ``(batch, num_classes)`` from the last hidden state.

    Example:
        >>> model = UnrolledLSTM(input_size=3, hidden=5, steps=4)
        >>> model(torch.randn(2, 4, 3)).shape
        torch.Size([2, 10])
    """

    def __init__(self, input_size: int, hidden: int, steps: int, num_classes: int = 10) -> None:
        super().__init__()
        self.hidden = hidden
        self.steps = steps
        self.cell = nn.LSTMCell(input_size, hidden)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 3 or x.shape[1] != self.steps:
            raise ValueError(f"expected (batch, {self.steps}, features), got {tuple(x.shape)}")
        h = x.new_zeros(x.shape[0], self.hidden)
        c = x.new_zeros(x.shape[0], self.hidden)
        for t in range(self.steps):
            h, c = self.cell(x[:, t], (h, c))
        return self.head(h)


class LSTMClassifier(nn.Module):
    """``nn.LSTM`` (``lstm``, batch_first) + ``head`` Linear on the last time step.

    Example:
        >>> LSTMClassifier(3, 5)(torch.randn(2, 4, 3)).shape
        torch.Size([2, 10])
    """

    def __init__(
        self, input_size: int, hidden: int, num_layers: int = 1, num_classes: int = 10
    ) -> None:
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden, num_layers=num_layers, batch_first=True)
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


def lstm_model(
    input_size: int = 32, hidden: int = 128, num_layers: int = 1, num_classes: int = 10
) -> LSTMClassifier:
    """Build an :class:`LSTMClassifier` (fused ``nn.LSTM``: one graph node per call).

    Example:
        >>> lstm_model(3, 5)(torch.randn(2, 7, 3)).shape
        torch.Size([2, 10])
    """
    return LSTMClassifier(input_size, hidden, num_layers=num_layers, num_classes=num_classes)
