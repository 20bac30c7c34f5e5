"""Where a non-finite loss came from: the first op of the forward whose output holds NaN/Inf.

The backward cannot tell: the gradient leaving a NaN loss is a finite 1.0, and what turns
NaN first in backward is the op nearest the loss that saved a NaN activation, not the one that
made it. So a run whose loss is NaN/Inf is run once more (run/capture.py), with the same seed
and so the same values, under `FirstNonfinite`: it looks at the floating outputs of every op in
forward order (a host sync per op, on that second run only) and keeps the first one in the
graph that is not finite. Its autograd node is the graph node the report's `nonfinite_origin`
names. (Where that op's input already held NaN/Inf, the sample input's or the held values'
findings say so: run/nonfinite.py.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from .nonfinite import all_finite, floating_leaves


@dataclasses.dataclass
class FoundNonfinite:
    """The first op of the forward with a NaN/Inf output that the graph tracks."""

    op: str
    grad_fn: Any  # its output's autograd node (dropped once named: it holds the graph)


class FirstNonfinite(TorchFunctionMode):
    """A TorchFunctionMode that keeps the first op whose output requiring grad is not finite.

    Example:
        >>> x = torch.tensor([-1.0, 4.0], requires_grad=True)
        >>> with FirstNonfinite() as probe:
        ...     y = (x * 2).sqrt().sum()
        >>> probe.found.op, type(probe.found.grad_fn).__name__
        ('sqrt', 'SqrtBackward0')
    """

    def __init__(self) -> None:
        super().__init__()
        self.found: FoundNonfinite | None = None

    def __torch_function__(
        self, func: Any, types: Any, args: tuple = (), kwargs: Mapping[str, Any] | None = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.found is None:
            with torch._C.DisableTorchFunction():  # the checks are ours, not the model's ops
                self._look(func, out)
        return out

    def _look(self, func: Any, out: Any) -> None:
        tracked = [t for t in floating_leaves(out) if t.grad_fn is not None]
        bad = next((t for t in tracked if not all_finite(t)), None)
        if bad is not None:
            name = getattr(func, "__name__", None) or str(func)
            self.found = FoundNonfinite(name, bad.grad_fn)
