"""Summaries of one tensor (norm, range, NaN/Inf counts, a small histogram), queued without sync."""

from __future__ import annotations

import dataclasses
import math
import weakref

import torch

from .stats import NormBatch

HIST_BINS = 16
_FIELDS = 8  # norm, min, max, mean, nan, inf, finite count, numel


@dataclasses.dataclass(frozen=True)
class TensorStats:
    """What a hook saw of one tensor. `histogram` counts finite values in HIST_BINS equal bins
    over [min, max].

    Example:
        >>> batch = NormBatch(torch.device("cpu"))
        >>> pending = queue_stats(torch.tensor([1.0, float("nan"), 3.0]), batch)
        >>> stats = read_stats(pending, batch.resolve())
        >>> stats.nan, stats.min, stats.max
        (1, 1.0, 3.0)
    """

    shape: tuple[int, ...]
    dtype: str
    norm: float
    min: float
    max: float
    mean: float
    nan: int
    inf: int
    histogram: tuple[int, ...]

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PendingStats:
    shape: tuple[int, ...]
    dtype: str
    slot: int


def queue_stats(t: torch.Tensor, batch: NormBatch) -> PendingStats:
    """Queue the statistics of `t` on its device; read them after `batch.resolve()`."""
    x = t.detach()
    if x.is_sparse:
        x = x.coalesce().values()
    if x.is_complex():
        x = x.abs()
    x = x.reshape(-1)
    if x.device.type == "cpu" and x.numel():
        fast = _cpu_stats(x)
        if fast is not None:
            slot = batch.add_vector(torch.tensor(fast, dtype=batch.dtype))
            return PendingStats(tuple(t.shape), str(t.dtype).replace("torch.", ""), slot)
    x = x.to(batch.dtype)
    finite = torch.isfinite(x)
    n_finite = finite.sum()
    # torch.full, not torch.tensor: a Python scalar copied to a GPU is a host sync per tensor
    big = torch.full((), math.inf, dtype=x.dtype, device=x.device)
    lo = torch.where(finite, x, big).amin() if x.numel() else big * 0
    hi = torch.where(finite, x, -big).amax() if x.numel() else big * 0
    clean = torch.where(finite, x, torch.zeros_like(x))
    head = torch.stack([
        torch.linalg.vector_norm(x),
        lo, hi,
        clean.sum() / n_finite.clamp(min=1),
        torch.isnan(x).sum().to(x.dtype),
        torch.isinf(x).sum().to(x.dtype),
        n_finite.to(x.dtype),
        torch.full((), float(x.numel()), dtype=x.dtype, device=x.device),
    ])
    width = (hi - lo).clamp(min=torch.finfo(x.dtype).tiny)
    idx = ((clean - lo) / width * HIST_BINS).floor().clamp(0, HIST_BINS - 1).long()
    idx = torch.where(finite, idx, torch.full_like(idx, HIST_BINS))  # non-finite: dropped bin
    counts = torch.zeros(HIST_BINS + 1, dtype=x.dtype, device=x.device)
    counts.scatter_add_(0, idx, torch.ones_like(x))
    slot = batch.add_vector(torch.cat([head, counts[:HIST_BINS]]))
    return PendingStats(tuple(t.shape), str(t.dtype).replace("torch.", ""), slot)


def _cpu_stats(x: torch.Tensor) -> list[float] | None:
    """The same numbers in a few float32 passes when `x` (CPU, flat) has no NaN/Inf and no
    extreme values; None sends it to the exact path."""
    xf = x if x.dtype in (torch.float32, torch.float64) else x.float()
    total = xf.sum().item()
    if not math.isfinite(total):
        return None  # NaN/Inf inside (or a sum that overflows): count them exactly
    lo, hi = (v.item() for v in torch.aminmax(xf))
    top = max(-lo, hi)
    if not (top == 0.0 or 1e-18 < top < 1e18):
        return None  # squares would underflow or overflow in float32
    n = xf.numel()
    norm = torch.linalg.vector_norm(xf).item()
    if hi > lo:
        counts = torch.histc(xf, bins=HIST_BINS, min=lo, max=hi).tolist()
    else:
        counts = [float(n)] + [0.0] * (HIST_BINS - 1)
    return [norm, lo, hi, total / n, 0.0, 0.0, float(n), float(n), *counts]


class StatsCache:
    """Statistics measured once per tensor per run: a container sees its last child's output
    and module k's grad_input is module k-1's grad_output, so the same data comes by often.
    Only a weak reference is kept: while it is alive nothing else can hold that memory, so the
    same pointer, layout and version mean the same values."""

    def __init__(self) -> None:
        self._seen: dict[tuple, tuple[weakref.ref, PendingStats]] = {}

    def get(self, t: torch.Tensor, batch: NormBatch) -> PendingStats:
        key = (t.data_ptr(), t.dtype, tuple(t.shape), t.stride(), t.storage_offset(),
               t._version, t.device)
        hit = self._seen.get(key)
        if hit is not None and hit[0]() is not None:
            return hit[1]
        stats = queue_stats(t, batch)
        self._seen[key] = (weakref.ref(t), stats)
        return stats

    def clear(self) -> None:
        self._seen = {}


def read_stats(p: PendingStats, values: list[float]) -> TensorStats:
    v = values[p.slot: p.slot + _FIELDS + HIST_BINS]
    empty = v[6] == 0
    return TensorStats(
        shape=p.shape, dtype=p.dtype, norm=v[0],
        min=math.nan if empty else v[1], max=math.nan if empty else v[2],
        mean=math.nan if empty else v[3], nan=int(v[4]), inf=int(v[5]),
        histogram=tuple(int(c) for c in v[_FIELDS:]),
    )
