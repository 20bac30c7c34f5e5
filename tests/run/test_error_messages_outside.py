"""Messages found by an outside try-out: each GradExplorerError says what actually happened
(not a neighbouring case's story) and what to do, in one clean sentence each."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer, GradExplorerError


def _message(make: Callable[[], GradExplorer]) -> str:
    with pytest.raises(GradExplorerError) as info:
        make().run()
    return str(info.value)


def _linear() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(4, 3)


def test_no_parameters_and_integer_input() -> None:
    message = _message(lambda: GradExplorer(nn.Identity(), torch.arange(4)))
    assert "no parameters" in message
    assert "integer input cannot" in message
    assert "requires_grad=True" in message and "a model that has parameters" in message
    assert "Unfreeze" not in message and "All 0 parameters" not in message


def test_no_parameters_and_float_input_without_grad() -> None:
    message = _message(lambda: GradExplorer(nn.Identity(), torch.randn(2, 4)))
    assert "no parameters" in message and "requires_grad=True" in message
    assert "integer" not in message and "Unfreeze" not in message


def test_no_parameters_and_input_that_requires_grad_runs() -> None:
    x = torch.randn(2, 4, requires_grad=True)
    ex = GradExplorer(nn.Tanh(), x)
    ex.run()
    assert ex.history


def test_frozen_model_still_says_unfreeze() -> None:
    model = _linear().requires_grad_(False)
    message = _message(lambda: GradExplorer(model, torch.randn(2, 4)))
    assert "All 2 parameters have requires_grad=False" in message
    assert "requires_grad_(True)" in message


@pytest.mark.parametrize(
    "loss_fn",
    [
        lambda out: torch.tensor(1.0),
        lambda out: out.detach().sum(),
        lambda out: torch.tensor(out.sum().item()),
    ],
    ids=["constant", "detached", "item"],
)
def test_loss_fn_not_computed_from_the_output(loss_fn: Callable[[Any], torch.Tensor]) -> None:
    message = _message(lambda: GradExplorer(_linear(), torch.randn(2, 4), loss_fn=loss_fn))
    assert "was not computed from the model's output" in message
    assert "no grad_fn" in message and "Compute the loss from the output" in message
    assert "integer outputs" not in message  # the output is floating point and requires grad
    assert "output output" not in message


def test_loss_fn_on_integer_output_keeps_its_advice() -> None:
    class ArgMax(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x).argmax(-1)

    message = _message(
        lambda: GradExplorer(ArgMax(), torch.randn(2, 4), loss_fn=lambda o: o.float().sum())
    )
    assert "does not require grad" in message and "integer outputs" in message
    assert "not computed from" not in message


def test_loss_fn_error_has_one_full_stop_and_no_doubled_word() -> None:
    message = _message(
        lambda: GradExplorer(
            _linear(),
            torch.randn(2, 4),
            loss_fn=nn.CrossEntropyLoss(),
            target=torch.tensor([0, 1, 2]),
        )
    )
    assert "batch_size (3). It is called as loss_fn(output, target)" in message
    assert ".." not in message
    assert "with output (2, 3) float32 requires_grad." in message
    assert "output output" not in message


def test_loss_fn_error_without_a_full_stop_gets_one() -> None:
    def loss_fn(out: torch.Tensor) -> torch.Tensor:
        raise ValueError("bad shape")

    message = _message(lambda: GradExplorer(_linear(), torch.randn(2, 4), loss_fn=loss_fn))
    assert "loss_fn raised ValueError: bad shape. It is called as loss_fn(output)" in message


def test_nothing_to_differentiate_names_the_output_once() -> None:
    class Detached(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"logits": self.fc(x).detach()}

    message = _message(lambda: GradExplorer(Detached(), torch.randn(2, 4)))
    assert "(output.logits (2, 3) float32)" in message
    assert "output output" not in message
