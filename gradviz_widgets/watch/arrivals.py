"""Gradients read as they arrive, for a watch without an optimizer whose parameters carry other
post-accumulate-grad hooks: PyTorch's "optimizer step in backward" recipe steps a per-parameter
optimizer and drops `p.grad` inside such a hook, so at the end of backward, where a step is read,
the gradients are gone (every row read "none", with a false `none` anomaly).

The watch's own hook runs first on every parameter (watch/params.py puts it at the front of the
hook dict), so it sees each gradient before another hook can take it: only for parameters
with another post-accumulate hook, their statistics are taken there and then, and used at the
end of backward for the ones whose `.grad` is gone by then. Nothing is held: the recipe exists
to free each gradient early.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch


class Arrivals:
    """Statistics of gradients taken in the watch's post-accumulate hook, until the next read.

    Example:
        >>> from gradviz_widgets.watch.reduce import grad_stats
        >>> p = torch.nn.Parameter(torch.zeros(2))
        >>> p.grad = torch.tensor([3.0, 4.0])
        >>> seen = Arrivals(grad_stats)
        >>> seen.take(p)
        >>> p.grad = None  # an optimizer stepped inside backward and dropped it
        >>> ids, stats = seen.merged([], np.zeros((0, 3)), [p])
        >>> ids, stats.tolist()
        ([0], [[5.0, 4.0, 2.0]])
    """

    def __init__(self, stats_fn: Callable[[list[torch.Tensor]], Any]) -> None:
        self.stats_fn = stats_fn
        self._seen: list[tuple[torch.Tensor, Any]] = []

    @staticmethod
    def shared(p: torch.Tensor) -> bool:
        """Whether another post-accumulate hook than the watch's may take `p.grad` away."""
        hooks = p._post_accumulate_grad_hooks
        return hooks is not None and len(hooks) > 1 and p.grad is not None

    def take(self, p: torch.Tensor) -> None:
        """Read `p.grad` now (the watch's hook, before any other)."""
        self._seen.append((p, self.stats_fn([p.grad.detach()])))  # type: ignore[union-attr]

    def merged(
        self, ids: list[int], stats: Any, params: Sequence[torch.Tensor]
    ) -> tuple[list[int], Any]:
        """`ids` and their `stats`, where the rows of the parameters read on arrival are those
        readings (a hook after the watch's may have dropped the gradient, or zeroed it with
        `zero_grad(set_to_none=False)`), added for the ones without a gradient now; forgets
        them."""
        seen, self._seen = self._seen, []
        slot = {id(p): i for i, p in enumerate(params)}
        arrived = {slot[id(p)]: row for p, row in seen if id(p) in slot}
        if not arrived:
            return ids, stats
        at = {i: k for k, i in enumerate(ids)}
        rows = [stats[k : k + 1] for k in range(len(ids))]
        for i, row in arrived.items():
            if i in at:
                rows[at[i]] = row
        added = [i for i in arrived if i not in at]
        rows += [arrived[i] for i in added]
        return [*ids, *added], _stacked(rows)


def _stacked(rows: list[Any]) -> Any:
    """Rows of readings (numpy arrays on the CPU, tensors on a device) as one reading."""
    if any(isinstance(r, torch.Tensor) for r in rows):
        device = next(r.device for r in rows if isinstance(r, torch.Tensor))
        return torch.cat([torch.as_tensor(r, dtype=torch.float64, device=device) for r in rows])
    return np.concatenate([np.asarray(r, dtype=np.float64) for r in rows])
