"""The loss a model returns itself: `ModelOutput.loss` (transformers with `labels=`), a `loss`
key of a dict output, a `loss` attribute. Without `loss_fn` that is the run's loss, as in
`model(**batch, labels=y).loss.backward()`; the other outputs (the logits) are not added to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

#: how the report names the model's own loss (the loss line, the summary, the page)
OWN_LOSS = "the model's own loss"


def own_loss(output: Any) -> tuple[str, torch.Tensor] | None:
    """(name, tensor) of the floating-point loss `output` carries, or None (also when that
    loss needs no grad: a detached copy kept for logging is no loss to differentiate).

    Example:
        >>> own_loss({"loss": torch.tensor(2.0, requires_grad=True), "logits": torch.ones(3)})[0]
        'output.loss'
        >>> own_loss(torch.ones(3)) is None
        True
    """
    if isinstance(output, torch.Tensor):
        return None
    if isinstance(output, Mapping):  # transformers' ModelOutput is an OrderedDict
        value = output.get("loss")
    else:
        try:
            value = getattr(output, "loss", None)
        except Exception:  # noqa: BLE001  (a property that raises: no loss of its own)
            return None
    if isinstance(value, torch.Tensor) and value.is_floating_point() and value.requires_grad:
        return "output.loss", value
    return None


def own_loss_scalar(output: Any) -> tuple[torch.Tensor, str] | None:
    """The model's own loss as the run's scalar, and how the report names it (a loss with more
    than one element is summed, and the name says so); None when the output has no loss."""
    found = own_loss(output)
    if found is None:
        return None
    name, value = found
    if value.numel() == 1:
        return (value if value.dim() == 0 else value.reshape(())), f"{name}, {OWN_LOSS}"
    return value.sum(), f"sum of {name} {tuple(value.shape)}, {OWN_LOSS}"


def own_loss_note(how: str, outputs: list[str]) -> tuple[str, ...]:
    """A finding when the run's loss is the model's own: which one, and which of the other
    differentiable `outputs` (names) were left out of it."""
    if OWN_LOSS not in how:
        return ()
    others = [n for n in outputs if n != "output.loss"]
    more = "…" if len(others) > 3 else ""
    # the model may have folded some of them into its loss itself (an MoE model's aux_loss):
    # only what this run did is said
    left_out = (
        f"; this run adds nothing to it ({', '.join(others[:3])}{more} as returned: the model's "
        "own loss may already hold some, as an MoE model's holds its aux_loss)"
        if others
        else ""
    )
    return (
        f"no loss_fn given: the loss is {how.replace(', ' + OWN_LOSS, '')}, the loss the model "
        f"returned (e.g. computed from labels=), as the model computed it"
        f"{left_out}; pass loss_fn=... to differentiate another loss",
    )
