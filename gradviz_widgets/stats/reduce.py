"""The reductions behind `stats.NormBatch`: exact L2 norms and max |g| of dense tensors, as float64
(`acc`) numbers left on their device.

Large tensors are reduced one by one (CUDA: fused `_foreach_norm`; elsewhere chunks copied to a
reused float64 buffer). Small CPU tensors are copied into one float64 buffer as they come and
reduced together by `segmented`: one kernel per reduction for the whole buffer, not ~10 per tensor.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Sequence
from typing import Any

import torch

#: elements per chunk. CPU: 256K (a 2 MiB float64 copy the dot product reads back from cache:
#: copy + dot ~15 % faster per element than with 1M chunks here; much smaller chunks mean more
#: parallel kernels, each of which stalls for a scheduler slice when the cores are
#: oversubscribed). Elsewhere the chunk only bounds the temporary memory.
_CHUNK_CPU, _CHUNK_DEVICE = 1 << 18, 1 << 24


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
            buf = bufs[key] = torch.empty(
                max(n, min(chunk_size(device), 4 * n)), dtype=dtype, device=device
            )
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
    exact = f.eps**2 >= 2 * a.eps  # twice the mantissa bits fit
    return exact and f.max**2 * 2.0**40 < a.max and smallest**2 >= a.tiny


def pow2_exponent(top: torch.Tensor) -> torch.Tensor:
    """e with 2^(e-1) <= top < 2^e (0 where top is 0, Inf or NaN), kept where 2^e and 2^-e are
    normal numbers: multiplying by them is exact."""
    e = torch.frexp(top).exponent
    limit = math.frexp(torch.finfo(top.dtype).max)[1] - 4
    e = torch.where(torch.isfinite(top) & (top > 0), e, torch.zeros_like(e))
    return e.clamp(-limit, limit)


def norms_and_maxes(
    grads: Sequence[torch.Tensor],
    acc: torch.dtype,
    scratch: Scratch | None = None,
    maxes: bool = True,
) -> list[tuple[list[int], torch.Tensor]]:
    """[L2 norm, max |g|] of dense tensors as `acc` numbers on their device, without a host sync:
    groups of (indices into `grads`, their pairs interleaved).

    Squares are summed in `acc` (float64), where those of float32/16/bf16 values are exact: norms
    of any size and magnitude read within ~1e-13 of the exact value. On CUDA one fused kernel
    per kind does this (`_foreach_norm(..., dtype=float64)` converts each element before
    squaring); elsewhere chunks are copied to a float64 buffer (see `_chunked`). Where squares
    would not fit (float64 gradients) chunks are first divided by a power of two near max |g|.
    `maxes=False`: the fused kernels skip max |g| (NaN in its place); the chunked path reads it
    anyway.

    Example:
        >>> x = torch.tensor([3e300, -4e300], dtype=torch.float64)
        >>> [(i, v.tolist()) for i, v in norms_and_maxes([x, torch.zeros(0)], torch.float64)]
        [([0, 1], [5e+300, 4e+300, 0.0, 0.0])]
    """
    flat = [distinct(magnitudes(g) if g.is_complex() else g) for g in grads]
    scratch = scratch or Scratch()
    if flat[0][0].device.type != "cuda":
        return _chunked(list(range(len(flat))), flat, acc, scratch)
    fused = [t for t, (x, _) in enumerate(flat) if x.numel() and squares_fit(x.dtype, acc)]
    rest = sorted(set(range(len(flat))) - set(fused))  # float64 and empty gradients
    return ([_fused(fused, flat, acc, maxes)] if fused else []) + (
        _chunked(rest, flat, acc, scratch) if rest else []
    )


def _fused(
    indices: list[int], flat: list[tuple[torch.Tensor, int]], acc: torch.dtype, maxes: bool
) -> tuple[list[int], torch.Tensor]:
    """Two fused kernels for all these tensors (float32/16/bf16 may be mixed); one without
    `maxes`."""
    xs = [flat[t][0] for t in indices]
    l2 = torch._foreach_norm(xs, 2, dtype=acc)
    repeats = [math.sqrt(flat[t][1]) for t in indices]
    if any(r != 1.0 for r in repeats):
        l2 = torch._foreach_mul(l2, repeats)
    norms = torch.stack(l2)
    top = (
        torch.stack(torch._foreach_norm(xs, math.inf, dtype=acc))
        if maxes
        else torch.full_like(norms, math.nan)
    )
    return indices, torch.stack([norms, top], 1).reshape(-1)


def _chunked(
    indices: list[int], flat: list[tuple[torch.Tensor, int]], acc: torch.dtype, scratch: Scratch
) -> list[tuple[list[int], torch.Tensor]]:
    """Chunks copied to a reused `acc` buffer, one dot product and one min/max per chunk;
    tensors with the same chunk count are reduced together."""
    device = flat[0][0].device
    step = chunk_size(device)
    buf = scratch.get(0, min(step, max(flat[t][0].numel() for t in indices)), acc, device)
    zero = torch.zeros((), dtype=acc, device=device)
    one, no_scale = torch.ones((), dtype=acc, device=device), zero.to(torch.int32)
    groups: dict[tuple, tuple[list[Any], list[Any], list[Any], list[Any]]] = {}
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
        for chunk in x.split(step) if n > step else [x] if n else []:
            b = buf[: chunk.numel()].copy_(chunk)
            if not fits:
                b.mul_(scale)
            sums.append(torch.dot(b, b) * repeats if repeats > 1 else torch.dot(b, b))
            ends += torch.aminmax(chunk if fits else b)  # float32 chunks: cheaper than b
        group = groups.setdefault((len(sums), ends[0].dtype), ([], [], [], []))
        for have, more in zip(group, ([t], sums, ends, [exponent])):
            have.extend(more)  # type: ignore[arg-type]
    out = []
    for (k, _), (members, sums, ends, exponents) in groups.items():
        total = torch.stack(sums).view(len(members), k).sum(1)
        lohi = torch.stack(ends).view(len(members), k, 2).to(acc)
        top = torch.maximum(-lohi[..., 0].amin(1), lohi[..., 1].amax(1)).abs()
        e = torch.stack(exponents)
        pairs = torch.stack([torch.ldexp(total.sqrt(), e), torch.ldexp(top, e)], 1)
        out.append((members, pairs.reshape(-1)))
    return out


def exact_squares(
    x: torch.Tensor, acc: torch.dtype, scratch: Scratch
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(sum of squares in `acc`, min, max) of a 1-d tensor whose squares are exact in `acc`
    (`squares_fit`), as 0-d tensors: `exact_sum`, and min and max read from `x` itself (exact
    in its own dtype; per chunk, while the chunk is still in cache). Three kernels for a tensor
    of up to one chunk, and nothing else: `finished_pairs` turns many of these into pairs at once.

    Example:
        >>> total, lo, hi = exact_squares(torch.tensor([3.0, -4.0]), torch.float64, Scratch())
        >>> total.item(), lo.item(), hi.item()
        (25.0, -4.0, 3.0)
    """
    if x.numel() <= chunk_size(x.device):
        lo, hi = torch.aminmax(x)
        return exact_sum(x, acc, scratch), lo, hi
    total, lo, hi = _per_chunk(x, acc, scratch, False)
    return total, lo, hi


def counted_squares(
    x: torch.Tensor, acc: torch.dtype, scratch: Scratch
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`exact_squares` and the number of non-zero elements (NaN counts, as in
    `count_nonzero`), in the same pass: the float64 copy, still in cache, is turned into 0/1 in
    place and dotted with itself (exact: a count below 2^53), cheaper than a `count_nonzero`
    that reads `x` from memory again.

    Example:
        >>> parts = counted_squares(torch.tensor([3.0, 0.0, float("nan")]), torch.float64, Scratch())
        >>> [p.item() for p in parts[1:]]
        [nan, nan, 2.0]
    """
    total, lo, hi, nonzero = _per_chunk(x, acc, scratch, True)
    return total, lo, hi, nonzero


def _per_chunk(
    x: torch.Tensor, acc: torch.dtype, scratch: Scratch, count: bool
) -> list[torch.Tensor]:
    """[sum of squares, min, max] (and the non-zero count with `count`) of `x`, chunk by chunk."""
    step = chunk_size(x.device)
    buf = scratch.get(0, min(step, x.numel()), acc, x.device)
    parts: list[torch.Tensor] = []
    for c in x.split(step):
        b = buf[: c.numel()].copy_(c)
        parts += [torch.dot(b, b), *torch.aminmax(c)]
        if count:
            parts.append(torch.dot(b.ne_(0), b))
    width = 4 if count else 3
    if len(parts) == width:  # one chunk: nothing to combine
        return parts
    cols = torch.stack(parts).view(-1, width)
    ends = [cols[:, 0].sum(), cols[:, 1].amin(), cols[:, 2].amax()]
    return [*ends, cols[:, 3].sum()] if count else ends


def exact_sum(x: torch.Tensor, acc: torch.dtype, scratch: Scratch) -> torch.Tensor:
    """The sum of squares in `acc` of a 1-d tensor whose squares are exact in `acc`, as a 0-d
    tensor: chunks copied to a reused `acc` buffer, one dot product each (two kernels for a
    tensor of up to one chunk). Zero exactly when every element is zero.

    Example:
        >>> exact_sum(torch.tensor([3.0, -4.0]), torch.float64, Scratch()).item()
        25.0
    """
    n, step = x.numel(), chunk_size(x.device)
    buf = scratch.get(0, min(n, step), acc, x.device)
    if n <= step:
        return torch.dot(buf.copy_(x), buf)
    dots = [torch.dot(buf[: c.numel()].copy_(c), buf[: c.numel()]) for c in x.split(step)]
    return torch.stack(dots).sum()


def finished_pairs(
    totals: Sequence[torch.Tensor],
    los: Sequence[torch.Tensor],
    his: Sequence[torch.Tensor],
    repeats: Sequence[int],
) -> torch.Tensor:
    """[L2 norm, max |x|] pairs, interleaved, from `exact_squares` results (each tensor's values
    repeated `repeats[k]` times): a few kernels for all of them.

    Example:
        >>> one = exact_squares(torch.tensor([3.0, -4.0]), torch.float64, Scratch())
        >>> finished_pairs(*zip(one, one), [1, 4]).tolist()
        [5.0, 4.0, 10.0, 4.0]
    """
    total = torch.stack(list(totals))
    if any(r != 1 for r in repeats):
        total = total * torch.tensor(repeats, dtype=total.dtype, device=total.device)
    top = torch.maximum(torch.stack(list(los)).neg(), torch.stack(list(his))).abs()
    return torch.stack([total.sqrt(), top.to(total.dtype)], 1).reshape(-1)


def dense(g: torch.Tensor) -> bool:
    """Whether `g`'s elements fill one block of memory exactly once, in some order (contiguous,
    transposed, permuted, or any view of those): then they are the `numel()` elements from
    `data_ptr()` on, whatever its shape.

    Example:
        >>> x = torch.zeros(2, 3, 4)
        >>> dense(x.permute(2, 0, 1)), dense(x[:, 1:]), dense(x.expand(2, 2, 3, 4))
        (True, False, False)
    """
    expected = 1
    for stride, size in sorted((st, sz) for sz, st in zip(g.shape, g.stride()) if sz != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def magnitudes(z: torch.Tensor) -> torch.Tensor:
    """|z| of a complex tensor in float64, whose squares are |z|^2 to float64 rounding (taken in
    z's own precision, a complex64's |z| carries float32's error into its norm).

    Example:
        >>> magnitudes(torch.tensor([3 + 4j], dtype=torch.complex64))
        tensor([5.], dtype=torch.float64)
    """
    return (z if z.dtype == torch.complex128 else z.to(torch.complex128)).abs()


def distinct(g: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The values of `g` laid out for a fast pass, and how often each repeats.

    Expanded gradients (stride 0, e.g. from `sum()`) hold one value many times: reduce over the
    distinct ones and scale the norm by sqrt(repeats). Transposed and permuted gradients are
    read in memory order (reductions over a transposed view are several times slower, and
    flattening a permuted one copies it)."""
    if any(st == 0 and sz > 1 for sz, st in zip(g.shape, g.stride())):
        base = g[
            tuple(
                slice(0, 1) if st == 0 and sz > 1 else slice(None)
                for sz, st in zip(g.shape, g.stride())
            )
        ]
        return base, g.numel() // base.numel()
    if g.dim() >= 2 and not g.is_contiguous() and dense(g):
        strides = g.stride()
        order = sorted(range(g.dim()), key=lambda d: -strides[d])
        return g.permute(order), 1
    return g, 1


def segmented(values: torch.Tensor, lengths: list[int], repeats: list[int]) -> torch.Tensor:
    """[L2 norm, max |x|] pairs, interleaved, of consecutive segments of a float64 (`acc`) buffer
    holding exact copies of float32/16/bf16 values (so squares and their sums are exact to
    ~len * 2^-53), segment k standing for its values repeated `repeats[k]` times. Overwrites
    `values`.

    Example:
        >>> segmented(torch.tensor([3.0, -4.0, 0.0, 2.0], dtype=torch.float64), [2, 0, 2], [1, 1, 4])
        tensor([5., 4., 0., 0., 4., 2.], dtype=torch.float64)
    """
    lens = torch.tensor(lengths, dtype=torch.int64, device=values.device)
    values.abs_()
    top = torch.segment_reduce(values, "max", lengths=lens, unsafe=True, initial=0.0)
    total = torch.segment_reduce(values.mul_(values), "sum", lengths=lens, unsafe=True, initial=0.0)
    if any(r != 1 for r in repeats):
        total.mul_(torch.tensor(repeats, dtype=total.dtype, device=total.device))
    return torch.stack([total.sqrt_(), top], 1).reshape(-1)
