"""Gradient norms computed on the device and read back in one host sync, and health statuses.

Norms accumulate in float64 (float32 on MPS, which has no float64) and are exact at any size and
magnitude: float32 squares underflow below ~1e-19, overflow above ~1.8e19 and float32 sums stop
growing past ~2^24 elements. Counts are int64. "zero" is decided by the elements (the largest |g|
is exactly 0), never by the norm.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import weakref
from collections.abc import Sequence

import torch

STATUSES = ("none", "zero", "vanishing", "healthy", "exploding", "nonfinite")


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Where "vanishing" and "exploding" start, as L2 norms of one gradient tensor.

    Defaults follow the usual rule of thumb (norms around 1e-8 stop a layer from learning;
    norms in the thousands make steps that overshoot). Set your own:

    Example:
        >>> Thresholds(vanishing=1e-6).exploding
        10000.0
    """

    vanishing: float = 1e-7
    exploding: float = 1e4

    def __post_init__(self) -> None:
        if not (0 <= self.vanishing < self.exploding):
            raise ValueError(
                f"thresholds must satisfy 0 <= vanishing < exploding, got "
                f"vanishing={self.vanishing}, exploding={self.exploding}"
            )


def classify(norm: float | None, max_abs: float | None, thresholds: Thresholds) -> str:
    """One of STATUSES for a gradient with this L2 norm and largest absolute element.

    Example:
        >>> classify(0.0, 0.0, Thresholds()), classify(None, None, Thresholds())
        ('zero', 'none')
    """
    if norm is None:
        return "none"
    if not math.isfinite(norm) or (max_abs is not None and not math.isfinite(max_abs)):
        return "nonfinite"
    if max_abs == 0.0:
        return "zero"
    if norm < thresholds.vanishing:
        return "vanishing"
    if norm > thresholds.exploding:
        return "exploding"
    return "healthy"


def accumulation_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


#: elements per chunk. CPU: 1M (an 8 MiB float64 copy, mostly in cache); smaller chunks mean more
#: parallel kernels, each of which stalls for a scheduler slice when the cores are oversubscribed.
#: Elsewhere the chunk only bounds the temporary memory.
_CHUNK_CPU, _CHUNK_DEVICE = 1 << 20, 1 << 24


def chunk_size(device: torch.device) -> int:
    return _CHUNK_CPU if device.type == "cpu" else _CHUNK_DEVICE


_CPU_BUFFERS = threading.local()  # a few MiB per thread, kept: fresh pages cost more than the pass


class Scratch:
    """Chunk-sized work buffers, reused for every tensor of a run (on the CPU, across runs)."""

    def __init__(self) -> None:
        self._bufs: dict[tuple, torch.Tensor] = {}

    def get(self, which: int, n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """Buffer `which` with room for n elements (its first n)."""
        if device.type == "cpu":
            bufs = _CPU_BUFFERS.__dict__.setdefault("bufs", {})
        else:
            bufs = self._bufs
        key = (which, dtype, device)
        buf = bufs.get(key)
        if buf is None or buf.numel() < n:
            buf = bufs[key] = torch.empty(max(n, min(chunk_size(device), 4 * n)),
                                          dtype=dtype, device=device)
        return buf[:n]


@functools.cache
def squares_fit(dtype: torch.dtype, acc: torch.dtype) -> bool:
    """Whether the square of every finite value of `dtype` is exact in `acc` and a sum of 2^40
    of them cannot overflow: float32/16/bf16 in float64 yes, float64 in float64 no.

    Example:
        >>> squares_fit(torch.float32, torch.float64), squares_fit(torch.float64, torch.float64)
        (True, False)
    """
    if not dtype.is_floating_point:
        return True  # integers and bool: |x| <= 2^63
    f, a = torch.finfo(dtype), torch.finfo(acc)
    smallest = f.tiny * f.eps  # the smallest subnormal
    exact = f.eps ** 2 >= 2 * a.eps  # twice the mantissa bits fit
    return exact and f.max ** 2 * 2.0 ** 40 < a.max and smallest ** 2 >= a.tiny


def pow2_exponent(top: torch.Tensor) -> torch.Tensor:
    """e with 2^(e-1) <= top < 2^e (0 where top is 0, Inf or NaN), kept where 2^e and 2^-e are
    normal numbers: multiplying by them is exact."""
    e = torch.frexp(top).exponent
    limit = math.frexp(torch.finfo(top.dtype).max)[1] - 4
    e = torch.where(torch.isfinite(top) & (top > 0), e, torch.zeros_like(e))
    return e.clamp(-limit, limit)


def norms_and_maxes(grads: Sequence[torch.Tensor], acc: torch.dtype,
                    scratch: Scratch | None = None) -> list[tuple[list[int], torch.Tensor]]:
    """[L2 norm, max |g|] of dense tensors as `acc` numbers on their device, without a host sync:
    groups of (indices into `grads`, their pairs interleaved).

    Squares are summed in `acc` (float64), where those of float32/16/bf16 values are exact: norms
    of any size and magnitude read within ~1e-13 of the exact value. On CUDA one fused kernel
    per kind does this (`_foreach_norm(..., dtype=float64)` converts each element before
    squaring); elsewhere chunks are copied to a float64 buffer (see `_chunked`). Where squares
    would not fit (float64 gradients) chunks are first divided by a power of two near max |g|.

    Example:
        >>> x = torch.tensor([3e300, -4e300], dtype=torch.float64)
        >>> [(i, v.tolist()) for i, v in norms_and_maxes([x, torch.zeros(0)], torch.float64)]
        [([0, 1], [5e+300, 4e+300, 0.0, 0.0])]
    """
    flat = [_distinct(g.abs() if g.is_complex() else g) for g in grads]
    scratch = scratch or Scratch()
    if flat[0][0].device.type != "cuda":
        return _chunked(list(range(len(flat))), flat, acc, scratch)
    fused = [t for t, (x, _) in enumerate(flat) if x.numel() and squares_fit(x.dtype, acc)]
    rest = sorted(set(range(len(flat))) - set(fused))  # float64 and empty gradients
    return ([_fused(fused, flat, acc)] if fused else []) + (
        _chunked(rest, flat, acc, scratch) if rest else [])


def _fused(indices: list[int], flat: list[tuple[torch.Tensor, int]], acc: torch.dtype
           ) -> tuple[list[int], torch.Tensor]:
    """Two fused kernels for all these tensors (float32/16/bf16 may be mixed)."""
    xs = [flat[t][0] for t in indices]
    l2 = torch._foreach_norm(xs, 2, dtype=acc)
    linf = torch._foreach_norm(xs, math.inf, dtype=acc)
    repeats = [math.sqrt(flat[t][1]) for t in indices]
    if any(r != 1.0 for r in repeats):
        l2 = torch._foreach_mul(l2, repeats)
    return indices, torch.stack([torch.stack(l2), torch.stack(linf)], 1).reshape(-1)


def _chunked(indices: list[int], flat: list[tuple[torch.Tensor, int]], acc: torch.dtype,
             scratch: Scratch) -> list[tuple[list[int], torch.Tensor]]:
    """Chunks copied to a reused `acc` buffer, one dot product and one min/max per chunk;
    tensors with the same chunk count are reduced together."""
    device = flat[0][0].device
    step = chunk_size(device)
    buf = scratch.get(0, min(step, max(flat[t][0].numel() for t in indices)), acc, device)
    zero = torch.zeros((), dtype=acc, device=device)
    one, no_scale = torch.ones((), dtype=acc, device=device), zero.to(torch.int32)
    groups: dict[tuple, tuple[list[int], list[torch.Tensor], list[torch.Tensor]]] = {}
    for t in indices:
        x, repeats = flat[t]
        n = x.numel()
        x = x.reshape(-1) if x.dim() != 1 else x
        exponent = no_scale
        fits = squares_fit(x.dtype, acc)
        if not fits and n:
            lo, hi = torch.aminmax(x)
            exponent = pow2_exponent(torch.maximum(-lo, hi).to(acc))
            scale = torch.ldexp(one, -exponent)
        sums, ends = ([], []) if n else ([zero], [zero, zero])
        for chunk in (x.split(step) if n > step else [x] if n else []):
            b = buf[: chunk.numel()].copy_(chunk)
            if not fits:
                b.mul_(scale)
            sums.append(torch.dot(b, b) * repeats if repeats > 1 else torch.dot(b, b))
            ends += torch.aminmax(chunk if fits else b)  # float32 chunks: cheaper than b
        group = groups.setdefault((len(sums), ends[0].dtype), ([], [], [], []))
        for have, more in zip(group, ([t], sums, ends, [exponent])):
            have.extend(more)
    out = []
    for (k, _), (members, sums, ends, exponents) in groups.items():
        total = torch.stack(sums).view(len(members), k).sum(1)
        lohi = torch.stack(ends).view(len(members), k, 2).to(acc)
        top = torch.maximum(-lohi[..., 0].amin(1), lohi[..., 1].amax(1)).abs()
        e = torch.stack(exponents)
        pairs = torch.stack([torch.ldexp(total.sqrt(), e), torch.ldexp(top, e)], 1)
        out.append((members, pairs.reshape(-1)))
    return out


class NormBatch:
    """Collects numbers as device tensors; `resolve()` reads them all back with one host sync.

    Norms and counts are exact at any size and magnitude (see `norms_and_maxes`); a tensor queued
    twice while alive (a gradient seen as one node's output and the next one's input) is
    measured once.

    Example:
        >>> batch = NormBatch(torch.device("cpu"))
        >>> slots = batch.add([torch.tensor([3.0, 4.0]), torch.zeros(2)])
        >>> values = batch.resolve()
        >>> [batch.pair(values, s) for s in slots]
        [(5.0, 4.0), (0.0, 0.0)]
    """

    def __init__(self, device: torch.device) -> None:
        self.dtype = accumulation_dtype(device)
        self._chunks: list[torch.Tensor] = []
        self._size = 0
        self._seen: dict[tuple, tuple[weakref.ref, int]] = {}
        self.scratch = Scratch()
        self.syncs = 0

    def add(self, grads: Sequence[torch.Tensor]) -> list[int]:
        """Queue (L2 norm, max |g|) of each gradient; returns the slot of each pair."""
        slots: list[int | None] = []
        fresh: list[tuple[int, torch.Tensor, tuple | None]] = []
        for i, g in enumerate(grads):
            key = _identity(g) if g.device.type != "cuda" else None  # fused there: no gain
            hit = self._seen.get(key) if key is not None else None
            slots.append(hit[1] if hit is not None and hit[0]() is not None else None)
            if slots[-1] is None:
                fresh.append((i, g, key))
        if fresh:
            dense = [g.coalesce().values() if g.is_sparse else g for _, g, _ in fresh]
            for indices, pairs in norms_and_maxes(dense, self.dtype, self.scratch):
                start = self.add_vector(pairs)
                for k, j in enumerate(indices):
                    i, g, key = fresh[j]
                    slots[i] = start + 2 * k
                    if key is not None:
                        self._seen[key] = (weakref.ref(g), start + 2 * k)
        return [s for s in slots if s is not None]

    def add_nonzero_counts(self, grads: Sequence[torch.Tensor]) -> int:
        """Queue the number of non-zero elements of each gradient (exact: counted in int64);
        returns the slot of the first count."""
        if not grads:
            return self._size
        counts = []
        for g in grads:
            x, repeats = _distinct(g.coalesce().values() if g.is_sparse else g)
            counts.append(torch.count_nonzero(x) * repeats if repeats > 1 else
                          torch.count_nonzero(x))
        return self.add_vector(torch.stack(counts))

    def add_scalar(self, value: torch.Tensor) -> int:
        """Queue any 0-d tensor (a loss value, a flag); returns its slot."""
        return self.add_vector(value.detach().reshape(1))

    def add_vector(self, values: torch.Tensor) -> int:
        """Queue a 1-d tensor; returns the slot of its first element."""
        start = self._size
        self._chunks.append(values.detach().to(self.dtype).reshape(-1))
        self._size += values.numel()
        return start

    def resolve(self) -> list[float]:
        """All queued numbers as Python floats: the single host synchronisation of a run."""
        self._seen, self.scratch = {}, Scratch()
        if not self._chunks:
            return []
        target = self._chunks[0].device
        chunks = [c if c.device == target else c.to(target) for c in self._chunks]
        self.syncs += 1
        values = torch.cat(chunks).tolist()
        self._chunks, self._size = [], 0
        return values

    @staticmethod
    def pair(values: list[float], slot: int) -> tuple[float, float]:
        return values[slot], values[slot + 1]


def _identity(g: torch.Tensor) -> tuple | None:
    """What makes two live tensors hold the same values (None: do not share)."""
    if g.layout != torch.strided or g.device.type == "meta":
        return None
    try:
        return (g.data_ptr(), g.dtype, tuple(g.shape), g.stride(), g.storage_offset(),
                g._version, g.device)
    except RuntimeError:  # tensors without storage (fake, functorch wrappers)
        return None


def _distinct(g: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The values of `g` laid out for a fast pass, and how often each repeats.

    Expanded gradients (stride 0, e.g. from `sum()`) hold one value many times: reduce over the
    distinct ones and scale the norm by sqrt(repeats). Transposed gradients are read in memory
    order (reductions over a transposed view are several times slower)."""
    if any(st == 0 and sz > 1 for sz, st in zip(g.shape, g.stride())):
        base = g[tuple(slice(0, 1) if st == 0 and sz > 1 else slice(None)
                       for sz, st in zip(g.shape, g.stride()))]
        return base, g.numel() // base.numel()
    if g.dim() >= 2 and not g.is_contiguous() and g.mT.is_contiguous():
        return g.mT, 1
    return g, 1


def combine_norms(norms: Sequence[float | None]) -> float | None:
    """The L2 norm of several tensors taken together, from their norms (None if all are None).

    Example:
        >>> combine_norms([3.0, None, 4.0])
        5.0
    """
    present = [n for n in norms if n is not None]
    if not present:
        return None
    if any(math.isnan(n) for n in present):
        return math.nan
    top = max(present)
    if top == 0.0 or math.isinf(top):
        return top
    # scaled by the largest, so norms of 1e-200 do not square to 0.0
    return top * math.sqrt(math.fsum((n / top) ** 2 for n in present))
