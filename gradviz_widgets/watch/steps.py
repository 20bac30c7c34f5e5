"""One step's numbers as the recorder hands them to the writer thread.

On the CPU they are plain float64 arrays at once; on CUDA one (n, 5) block is copied to pinned
host memory without blocking, with an event the writer thread polls. `dist` carries this rank's
part of the cross-rank check (watch/ranks.py), resolved by the writer too.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np
import torch

#: columns of a step's values: per parameter with a gradient
VALUES = ("norm", "max_abs", "nonzero", "delta_norm", "param_norm")


@dataclasses.dataclass
class StepRecord:
    """One step's numbers: `ids` are the watched parameters that had a gradient."""

    step: int
    time: float
    ids: np.ndarray
    values: np.ndarray | None = None
    pending: tuple[torch.Tensor, Any] | None = None
    #: this rank's part of the cross-rank check: (own-gradient flags, FSDP2 weights) or None
    extra: Any = None

    def ready(self) -> bool:
        """Whether the numbers can be read without waiting for the device."""
        return self.pending is None or self.pending[1] is None or self.pending[1].query()

    def resolve(self) -> np.ndarray:
        """The (len(ids), 5) float64 values; waits for the device copy (writer thread only)."""
        if self.values is None and self.pending is not None:
            host, event = self.pending
            if event is not None:
                event.synchronize()
            self.values = host.double().numpy()
            self.pending = None
        return self.values  # type: ignore[return-value]


def trigger_array(stats: np.ndarray, flight: bool | float) -> bool:
    # one sum first: finite unless a value is NaN/Inf (or the sum overflows: then look closer)
    if not math.isfinite(float(stats[:, :2].sum())) and not np.isfinite(stats[:, :2]).all():
        return True
    return flight is not True and bool((stats[:, 0] > float(flight)).any())


def trigger_tensor(stats: torch.Tensor, flight: bool | float) -> torch.Tensor:
    bad = ~torch.isfinite(stats[:, :2]).all(dim=1)
    if flight is not True:
        bad |= stats[:, 0] > float(flight)
    return bad.any()


def assemble(
    step: int, ids: list[int], stats: Any, dnorm: Any, pnorm: Any, extra: Any = None
) -> StepRecord:
    """One (n, 5) block per step; on an accelerator one non-blocking copy to pinned memory."""
    ids_arr = np.asarray(ids, dtype=np.int64)
    if not isinstance(stats, torch.Tensor):
        values = np.full((len(ids), 5), np.nan)
        values[:, :3] = stats
        if dnorm is not None:
            values[:, 3] = _as_np(dnorm)
            values[:, 4] = _as_np(pnorm)
        return StepRecord(step, time.time(), ids_arr, values=values, extra=extra)
    cols = [stats]
    if dnorm is not None:
        cols += [
            torch.as_tensor(dnorm, device=stats.device, dtype=stats.dtype).reshape(-1, 1),
            torch.as_tensor(pnorm, device=stats.device, dtype=stats.dtype).reshape(-1, 1),
        ]
    else:
        cols.append(torch.full((len(ids), 2), float("nan"), device=stats.device, dtype=stats.dtype))
    block = torch.cat(cols, dim=1)
    if block.device.type != "cuda":
        return StepRecord(
            step, time.time(), ids_arr, values=block.cpu().double().numpy(), extra=extra
        )
    host = torch.empty(block.shape, dtype=block.dtype, pin_memory=True)
    host.copy_(block, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return StepRecord(step, time.time(), ids_arr, pending=(host, event), extra=extra)


def _as_np(x: Any) -> np.ndarray:
    return x.cpu().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
