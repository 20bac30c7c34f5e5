"""Update ratios ‖p_after − p_before‖ / ‖p_before‖: the parameters before a step, kept in
persistent buffers (allocated once, reused every step) and compared after it.

Costs per measured step: one copy of the parameters before the step, and after it one
subtraction into the same buffers plus two norms. Small CPU models are copied into one float64
numpy buffer (three vectorised calls in all); larger ones and accelerators use `_foreach_copy_` /
`_foreach_sub_` (one call each for all tensors) and the norms of `reduce.param_norms`. Nothing here
synchronises with an accelerator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .reduce import by_device, is_small_cpu, param_norms, segment_norms


class Snapshot:
    """`take(ids, live)` before the step, `measure(live)` after it: (‖Δp‖, ‖p_before‖) each.

    Example:
        >>> w = torch.tensor([3.0, 4.0])
        >>> snap = Snapshot(); snap.take([0], [w]); _ = w.add_(1.0)  # the optimizer's step
        >>> [x.tolist() for x in snap.measure([w])]
        [[1.4142135623730951], [5.0]]
    """

    def __init__(self) -> None:
        self._key: Any = None
        self._old: Any = None
        self._new: np.ndarray | None = None
        self._sizes: tuple[int, ...] = ()
        self._views: list[np.ndarray] | None = None

    def reset(self) -> None:
        """Forget the buffers (the model moved to another device or dtype)."""
        self._key = self._old = self._new = self._views = None

    def take(self, ids: Sequence[int], params: Sequence[torch.Tensor]) -> None:
        key = (tuple(ids), tuple(p.data_ptr() for p in params))
        if key != self._key:
            self._allocate(params)
            self._key = key
        if self._new is not None:
            np.concatenate(self._views or [_flat(p) for p in params], out=self._old)
        else:
            torch._foreach_copy_(self._old, [p.detach() for p in params])

    def measure(self, params: Sequence[torch.Tensor]) -> tuple[Any, Any]:
        if self._new is not None:
            new = np.concatenate(self._views or [_flat(p) for p in params], out=self._new)
            pnorm = segment_norms(self._old, self._sizes)
            np.subtract(new, self._old, out=new)
            return segment_norms(new, self._sizes), pnorm
        pnorm = by_device(param_norms, self._old)
        torch._foreach_sub_(self._old, [p.detach() for p in params])  # now -Δp
        return by_device(param_norms, self._old), pnorm

    def _allocate(self, live: Sequence[torch.Tensor]) -> None:
        if is_small_cpu(live):
            self._sizes = tuple(t.numel() for t in live)
            self._old = np.empty(sum(self._sizes), dtype=np.float64)
            self._new = np.empty_like(self._old)
            # numpy views of the parameters' own storage, valid while their data pointers
            # (the key) stay; non-contiguous parameters are flattened (copied) every time
            self._views = [_flat(p) for p in live] if all(p.is_contiguous() for p in live) else None
        else:
            self._old = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in live]
            self._new = self._views = None


def _flat(p: torch.Tensor) -> np.ndarray:
    return p.detach().numpy().reshape(-1)
