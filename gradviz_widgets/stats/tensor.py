"""Summaries of one tensor (norm, range, NaN/Inf counts, a small histogram), queued without sync.

Exact at any size and magnitude, like the gradient norms of `stats`."""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Iterator

import torch

from .norms import NormBatch
from .reduce import Scratch, chunk_size, distinct, magnitudes, pow2_exponent, squares_fit

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
        x = magnitudes(x)
    # x holds t's own memory (not a coalesced or |complex| copy), no element twice: its parts
    # may be shared, kept while t lives
    own = t.layout is torch.strided and not t.is_complex() and distinct(x)[1] == 1
    flat = x.reshape(-1)
    shared = (batch, (x, t)) if own else (None, None)
    slot = batch.add_vector(stats_vector(flat, batch.dtype, batch.scratch, *shared))
    return PendingStats(tuple(t.shape), str(t.dtype).replace("torch.", ""), slot)


def stats_vector(
    x: torch.Tensor,
    acc: torch.dtype,
    scratch: Scratch | None = None,
    batch: NormBatch | None = None,
    whole: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """The _FIELDS + HIST_BINS numbers of a flat tensor, exact at any size and magnitude and
    without a host sync: chunks are copied to `acc` (float64; float64 tensors are divided by a
    power of two near their largest finite |x| first), counts are exact integers. With `batch`
    (and `whole`: the tensor `x` flattens and the live tensor it was detached from), a finite
    CPU tensor takes its sum of squares and range from `batch.exact_parts`: measured once
    whether the flow or the hook asks first.

    Example:
        >>> stats_vector(torch.tensor([3.0, 4.0, float("nan")]), torch.float64)[:8].tolist()
        [nan, 3.0, 4.0, 3.5, 1.0, 0.0, 2.0, 3.0]
    """
    n = x.numel()
    if n == 0:
        return torch.zeros(_FIELDS + HIST_BINS, dtype=acc, device=x.device)
    scratch = scratch or Scratch()
    if x.device.type == "cpu" and squares_fit(x.dtype, acc) and x.dtype.is_floating_point:
        norm2 = None
        if batch is not None and batch.dtype == acc:
            norm2, lo, hi = batch.exact_parts(*(whole or (x, x)))
        else:
            lo, hi = torch.aminmax(x)
        low, high = lo.item(), hi.item()  # on the CPU a read waits for nothing
        if math.isfinite(low) and math.isfinite(high):
            return _finite_cpu_stats(x, low, high, acc, scratch, norm2)
    return general_stats(x, acc, scratch)


def general_stats(x: torch.Tensor, acc: torch.dtype, scratch: Scratch) -> torch.Tensor:
    """`stats_vector` of any non-empty flat tensor on any device, NaN/Inf and float64 included,
    without reading anything back."""
    n = x.numel()
    size = min(chunk_size(x.device), n)
    buf, tmp = scratch.get(1, size, acc, x.device), scratch.get(2, size, acc, x.device)
    one = torch.ones((), dtype=acc, device=x.device)
    exponent = torch.zeros((), dtype=torch.int32, device=x.device)
    scaled = not squares_fit(x.dtype, acc)
    if scaled:
        exponent = pow2_exponent(torch.nan_to_num(x.abs(), 0.0, 0.0, 0.0).amax().to(acc))
    scale, big = torch.ldexp(one, -exponent), torch.finfo(acc).max

    def chunks() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for chunk in x.split(size):
            b = buf[: chunk.numel()].copy_(chunk)
            yield (b.mul_(scale) if scaled else b), tmp[: chunk.numel()]

    parts = []  # per chunk: sum of squares, finite sum, finite min, finite max, NaN, non-finite
    for b, t in chunks():
        norm2 = torch.dot(b, b)
        total = torch.nan_to_num(b, 0.0, 0.0, 0.0, out=t).sum()
        nonfinite = torch.count_nonzero(t != b)
        lo = torch.nan_to_num(b, big, big, big, out=t).amin()
        hi = torch.nan_to_num(b, -big, -big, -big, out=t).amax()
        parts += [norm2, total, lo, hi, torch.count_nonzero(b != b).to(acc), nonfinite.to(acc)]
    p = torch.stack(parts).view(-1, 6)
    lo, hi, n_nan, n_bad = p[:, 2].amin(), p[:, 3].amax(), p[:, 4].sum(), p[:, 5].sum()
    n_finite = n - n_bad
    per_bin = (HIST_BINS / (hi - lo)).clamp(max=big)  # one value: all in the first bin
    counts = torch.zeros(HIST_BINS + 1, dtype=torch.int64, device=x.device)
    for b, t in chunks():  # second pass: the bins need the finite range of the whole tensor
        torch.sub(b, lo, out=t).mul_(per_bin).nan_to_num_(-1.0, -1.0, -1.0)  # non-finite: -1
        idx = t.floor_().clamp_(max=HIST_BINS - 1).add_(1).long()  # 0: dropped, 1..: the bins
        counts.scatter_add_(
            0, idx, torch.ones((), dtype=torch.int64, device=x.device).expand(idx.numel())
        )
    unscale = torch.ldexp(one, exponent)
    head = torch.stack(
        [
            p[:, 0].sum().sqrt() * unscale,
            lo * unscale,
            hi * unscale,
            p[:, 1].sum() / n_finite.clamp(min=1) * unscale,
            n_nan,
            n_bad - n_nan,
            n_finite,
            torch.full_like(one, float(n)),
        ]
    )
    return torch.cat([head, counts[1:].to(acc)])


def _finite_cpu_stats(
    x: torch.Tensor,
    lo: float,
    hi: float,
    acc: torch.dtype,
    scratch: Scratch,
    norm2: torch.Tensor | None = None,
) -> torch.Tensor:
    """`stats_vector` of a finite float32/16/bf16 CPU tensor with range [lo, hi] (read first:
    a CPU read waits for nothing), the same numbers as the general path in under half the
    kernels: no NaN/Inf to mask out, the bins from the float64 copy in place, and a
    `bincount` over byte-sized bin indices where the general path scatters. Squares and sums
    of these values are exact in float64; the bins are the general path's
    ((x - lo) * HIST_BINS / (hi - lo), floored, in float64; the maximum in the last bin).
    `norm2`: the sum of squares, when already measured."""
    n = x.numel()
    size = min(chunk_size(x.device), n)
    buf = scratch.get(1, size, acc, x.device)
    # bin indices: bincount reads bytes fastest; double -> int16 -> byte converts ~2x faster
    # than double -> byte (the same truncation: the values are in [0, HIST_BINS])
    where, wide = torch.empty(size, dtype=torch.uint8), torch.empty(size, dtype=torch.int16)
    per_bin = HIST_BINS / (hi - lo) if hi > lo else 0.0  # one value: all in the first bin
    sums, dots, counts = [], [], torch.zeros(HIST_BINS + 1, dtype=torch.int64)
    for chunk in x.split(size):
        k = chunk.numel()
        b = buf[:k].copy_(chunk)
        sums.append(b.sum())
        if norm2 is None:
            dots.append(torch.dot(b, b))
        # in place on the copy, still in cache; b - lo >= 0 (lo is the minimum), so the
        # conversion's truncation is the floor; x == hi lands in bin HIST_BINS, folded below
        b.sub_(lo).mul_(per_bin)
        counts += torch.bincount(where[:k].copy_(wide[:k].copy_(b)), minlength=HIST_BINS + 1)
    counts[HIST_BINS - 1] += counts[HIST_BINS]
    counts = counts[:HIST_BINS]
    total = sums[0] if len(sums) == 1 else torch.stack(sums).sum()
    if norm2 is None:
        norm2 = dots[0] if len(dots) == 1 else torch.stack(dots).sum()
    rest = torch.tensor([lo, hi, 0.0, 0.0, 0.0, float(n), float(n)], dtype=acc)
    rest[2] = total / n
    return torch.cat([norm2.sqrt().reshape(1), rest, counts.to(acc)])


class StatsCache:
    """Statistics measured once per tensor per run: a container sees its last child's output
    and module k's grad_input is module k-1's grad_output, so the same data comes by often.
    Only a weak reference is kept: while it is alive nothing else can hold that memory, so the
    same pointer, layout and version mean the same values."""

    def __init__(self) -> None:
        self._seen: dict[tuple, tuple[weakref.ref, PendingStats]] = {}

    def get(self, t: torch.Tensor, batch: NormBatch) -> PendingStats:
        key = (
            t.data_ptr(),
            t.dtype,
            tuple(t.shape),
            t.stride(),
            t.storage_offset(),
            t._version,
            t.device,
        )
        hit = self._seen.get(key)
        if hit is not None and hit[0]() is not None:
            return hit[1]
        stats = queue_stats(t, batch)
        self._seen[key] = (weakref.ref(t), stats)
        return stats

    def clear(self) -> None:
        self._seen = {}


def read_stats(p: PendingStats, values: list[float]) -> TensorStats:
    v = values[p.slot : p.slot + _FIELDS + HIST_BINS]
    empty = v[6] == 0
    return TensorStats(
        shape=p.shape,
        dtype=p.dtype,
        norm=v[0],
        min=math.nan if empty else v[1],
        max=math.nan if empty else v[2],
        mean=math.nan if empty else v[3],
        nan=int(v[4]),
        inf=int(v[5]),
        histogram=tuple(int(c) for c in v[_FIELDS:]),
    )
