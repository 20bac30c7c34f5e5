"""One step's numbers as the recorder hands them to the writer thread.

On the CPU they are plain float64 arrays at once; on CUDA one (n, 5) block is copied to pinned
host memory without blocking, with an event the writer thread polls. `dist` carries this rank's
part of the cross-rank check (watch/ranks.py), resolved by the writer too.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch

from .holders import merge

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
    #: (skipped, loss scale, clipped) of the step (a list of them: several optimizers' parts),
    #: or None: not skipped, no scaler, not clipped; device scalars are read by the writer
    info: tuple | list | None = None
    #: the records of several optimizers' parts of one step (watch/rounds.py)
    parts: list[StepRecord] | None = None
    #: parameters holding NaN/Inf at a step whose gradients turned NaN/Inf (watch/holders.py
    #: `Held`), None where there is nothing to say
    held: Any = None
    #: the parameters of the optimizers whose step the GradScaler skipped, when others' went on
    #: (one scaler over a GAN's two optimizers); None: the step-wide `skipped` says it all
    skipped_ids: np.ndarray | None = None

    def ready(self) -> bool:
        """Whether the numbers can be read without waiting for the device."""
        if self.parts is not None:
            return all(p.ready() for p in self.parts)
        return self.pending is None or self.pending[1] is None or self.pending[1].query()

    def resolve(self) -> np.ndarray:
        """The (len(ids), 5) float64 values; waits for the device copy (writer thread only)."""
        if self.values is None and self.parts is not None:
            self.values = np.concatenate([p.resolve() for p in self.parts])
        if self.values is None and self.pending is not None:
            host, event = self.pending
            if event is not None:
                event.synchronize()
            self.values = host.double().numpy()
            self.pending = None
        return self.values  # type: ignore[return-value]


def step_info(info: tuple | list | None) -> tuple[bool, float | None, bool | None]:
    """(skipped, scale, clipped) as plain values (device scalars are read here: writer thread);
    several parts: skipped if one was, the first scale, clipped if one was (<NA> if unknown).

    Example:
        >>> step_info((True, torch.tensor(1024.0), None))
        (True, 1024.0, None)
        >>> step_info([(False, None, False), (True, 2.0, True)])
        (True, 2.0, True)
    """
    if info is None:
        return False, None, False
    if isinstance(info, list):
        parts = [step_info(i) for i in info]
        flags = [c for _, _, c in parts]
        return (
            any(s for s, _, _ in parts),
            next((x for _, x, _ in parts if x is not None), None),
            True if True in flags else (None if None in flags else False),
        )
    skipped, scale, clipped = info
    return (
        bool(skipped),
        None if scale is None else float(scale),
        None if clipped is None else bool(clipped),
    )


def combine(parts: list[StepRecord]) -> StepRecord:
    """Several optimizers' records of one step as one (their parameters are disjoint). Where
    the GradScaler skipped some of their steps but not all, the step is not skipped as a
    whole: `skipped_ids` names the parameters that were not updated."""
    first = parts[0]
    ids = np.concatenate([p.ids for p in parts])
    flags = [_skipped(p.info) for p in parts]
    partly = any(flags) and not all(flags)
    infos = [_not_skipped(p.info) if partly else p.info for p in parts]
    info = [i for i in infos if i is not None] or None
    extra = None
    if all(p.extra is not None for p in parts):
        own = np.logical_or.reduce([p.extra[0] for p in parts])
        weights = [p.extra[1] for p in parts]
        extra = (own, None if weights[0] is None else np.concatenate(weights))
    rec = StepRecord(first.step, max(p.time for p in parts), ids, extra=extra, info=info)
    rec.held = merge([p.held for p in parts])
    if partly:
        rec.skipped_ids = np.concatenate([p.ids for p, f in zip(parts, flags) if f])
    if all(p.values is not None for p in parts):
        rec.values = np.concatenate([p.values for p in parts])  # type: ignore[misc]
    else:
        rec.parts = parts
    return rec


def _skipped(info: Any) -> bool:
    """Whether one optimizer's part was skipped by the GradScaler (its flag is a plain bool)."""
    return isinstance(info, tuple) and bool(info[0])


def _not_skipped(info: Any) -> Any:
    return (False, *info[1:]) if isinstance(info, tuple) else info


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
