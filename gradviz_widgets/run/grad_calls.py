"""Gradients taken inside the loss: `torch.autograd.grad(..., create_graph=True)` in `loss_fn`
(gradient penalties such as WGAN-GP's, MAML's inner step) over the model's parameters or the
sample input, as plain PyTorch computes them.

A run differentiates stand-ins of the parameters and a copy of the input, so a `loss_fn` that
closes over the user's own tensors (`params = list(model.parameters())` made before, the sample
`x`) would ask for gradients of tensors the run's graph does not contain. While the loss is made,
`GradCalls` answers such a call for the run's tensor and the user's tensor together (the user's
may be used directly too) and adds the two, as a plain backward would; the call's own
`allow_unused` / `materialize_grads` still decide what an unused tensor gives. `.backward()`
inside the loss is refused: it would write `.grad` (of parameters used directly, the user's own).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from ..errors import GradExplorerError

_BACKWARD = (torch.autograd.backward, torch.Tensor.backward)
#: torch's own words for an unused input (the call did not allow it)
UNUSED = (
    "One of the differentiated Tensors appears to not have been used in the graph. "
    "Set allow_unused=True if this is the desired behavior."
)


class GradCalls(TorchFunctionMode):
    """While active: `torch.autograd.grad` over a tensor in `replaced` (id(user tensor) -> the
    run's tensor standing in for it) is answered for both; `.backward()` is refused."""

    def __init__(self, replaced: Mapping[int, torch.Tensor]) -> None:
        super().__init__()
        self.replaced = replaced

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if func is torch.autograd.grad:
            return self._grad(*args, **kwargs)
        if func in _BACKWARD:
            raise GradExplorerError(
                "loss_fn called .backward(): the explorer takes the gradients of the loss "
                "itself, and a backward inside the loss would write .grad. For gradients inside "
                "the loss (a gradient penalty, a MAML inner step) use torch.autograd.grad(..., "
                "create_graph=True), which the explorer supports."
            )
        return func(*args, **kwargs)

    def _grad(self, outputs: Any, inputs: Any, **kwargs: Any) -> tuple:
        single = isinstance(inputs, torch.Tensor)
        given = [inputs] if single else list(inputs)
        if not any(isinstance(t, torch.Tensor) and id(t) in self.replaced for t in given):
            return torch.autograd.grad(outputs, inputs, **kwargs)
        asked: list[Any] = []
        plan: list[list[int]] = []  # positions in `asked` of each given input's parts
        for t in given:
            stand_in = self.replaced.get(id(t)) if isinstance(t, torch.Tensor) else None
            parts = [t] if stand_in is None or not stand_in.requires_grad else [stand_in]
            if stand_in is not None and stand_in.requires_grad and t.requires_grad:
                parts.append(t)  # the user's tensor itself, where it is used directly
            plan.append(list(range(len(asked), len(asked) + len(parts))))
            asked += parts
        materialize = bool(kwargs.get("materialize_grads", False))
        allow_unused = kwargs.get("allow_unused")
        allow_unused = materialize if allow_unused is None else allow_unused
        got = torch.autograd.grad(
            outputs, asked, **{**kwargs, "allow_unused": True, "materialize_grads": False}
        )
        result = []
        for t, where in zip(given, plan):
            parts = [got[i] for i in where if got[i] is not None]
            g = parts[0] if len(parts) == 1 else (parts[0] + parts[1] if parts else None)
            if g is None and materialize:
                g = torch.zeros_like(t)
            elif g is None and not allow_unused:
                raise RuntimeError(UNUSED)
            result.append(g)
        return tuple(result)
