"""Update ratios ‖p_after − p_before‖ / ‖p_before‖: the parameters before a step, kept in
persistent buffers (allocated once, reused every step) and compared after it.

Costs per measured step: one copy of the parameters before the step, and after it one
subtraction into the same buffers plus two norms. Small CPU models are copied into one float64
numpy buffer (three vectorised calls in all); larger ones and accelerators use `_foreach_copy_` /
`_foreach_sub_` (one call each for all tensors) and the norms of `reduce.param_norms`. bfloat16 /
float16 parameters are kept in their dtype, but their Δp is formed in float64 (float32 on MPS),
chunk by chunk: in their own dtype it would be rounded to 8 / 11 bits. Nothing here
synchronises with an accelerator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..stats.norms import accumulation_dtype
from ..stats.reduce import Scratch, chunk_size
from .reduce import by_device, in_order, is_small_cpu, param_norms, segment_norms

_LOW = (torch.bfloat16, torch.float16)
_SCRATCH = Scratch()


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
            views = self._views
            if views is not None and tuple(p.data_ptr() for p in params) != self._key[1]:
                # the step gave a parameter new storage (`p.data = p.data - lr * g`, SAM's
                # `p.data = old_p`): the views read the storage from before the step
                views = self._views = None
                self._key = None
            new = np.concatenate(views or [_flat(p) for p in params], out=self._new)
            pnorm = segment_norms(self._old, self._sizes)
            np.subtract(new, self._old, out=new)
            return segment_norms(new, self._sizes), pnorm
        pnorm = by_device(param_norms, self._old)
        live = {id(old): p.detach() for old, p in zip(self._old, params)}
        dnorm = by_device(lambda olds: delta_norms(olds, [live[id(o)] for o in olds]), self._old)
        return dnorm, pnorm

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


def delta_norms(old: list[torch.Tensor], new: list[torch.Tensor]) -> np.ndarray | torch.Tensor:
    """‖new − old‖ per tensor pair on one device; overwrites `old` (but bfloat16/float16 ones)
    with old − new.

    Example:
        >>> old = [torch.tensor([1.0, 2.0]), torch.tensor([1.0], dtype=torch.bfloat16)]
        >>> delta_norms(old, [torch.tensor([4.0, 6.0]), torch.tensor([-1.0], dtype=torch.bfloat16)])
        array([5., 2.])
    """
    low = [i for i, t in enumerate(old) if t.dtype in _LOW]
    if not low:
        torch._foreach_sub_(old, new)  # now -Δp: exact for float32 steps (Sterbenz)
        return param_norms(old)
    rest = sorted(set(range(len(old))) - set(low))
    parts: list[tuple[list[int], Any]] = [(low, _wide_delta_norms([(old[i], new[i]) for i in low]))]
    if rest:
        torch._foreach_sub_([old[i] for i in rest], [new[i] for i in rest])
        parts.append((rest, param_norms([old[i] for i in rest])))
    return in_order(len(old), parts)  # type: ignore[no-any-return]


def _wide_delta_norms(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> np.ndarray | torch.Tensor:
    """‖new − old‖ of low-precision pairs, the difference formed in a float64 (MPS: float32)
    chunk buffer from the exact conversions of both, its squares summed there."""
    device = pairs[0][0].device
    acc, step = accumulation_dtype(device), chunk_size(device)
    zero = torch.zeros((), dtype=acc, device=device)
    sums = []
    for old, new in pairs:
        a, b = new.reshape(-1), old.reshape(-1)
        buf = _SCRATCH.get(1, min(step, a.numel()), acc, device)
        dots = [zero]
        for x, y in zip(a.split(step), b.split(step)):
            d = buf[: x.numel()].copy_(x).sub_(y)
            dots.append(torch.dot(d, d))
        sums.append(torch.stack(dots).sum())
    norms = torch.stack(sums).sqrt()
    return norms.numpy() if norms.is_cpu else norms
