"""Gradient norms computed on the device and read back in one host sync (statuses, thresholds
and `classify` live in vocabulary.py and are re-exported here).

Norms accumulate in float64 (float32 on MPS, which has no float64) and are exact at any size and
magnitude: float32 squares underflow below ~1e-19, overflow above ~1.8e19 and float32 sums stop
growing past ~2^24 elements. Counts are int64. "zero" is decided by the elements (the largest |g|
is exactly 0), never by the norm.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TypeVar

import numpy as np
import torch

# the statuses, thresholds and `classify` live in vocabulary.py (no torch); re-exported
from ..vocabulary import STATUSES, Thresholds, classify, combine_norms  # noqa: F401
from .reduce import (
    Scratch,
    chunk_size,
    counted_squares,
    dense,
    distinct,
    exact_squares,
    exact_sum,
    finished_pairs,
    norms_and_maxes,
    segmented,
    squares_fit,
)


def accumulation_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


class NormBatch:
    """Collects numbers as device tensors; `resolve()` reads them all back with one host sync.

    Norms and counts are exact at any size and magnitude (see `norms_and_maxes`). Small CPU
    gradients (up to SMALL elements) are copied as float64 into one pending buffer of PENDING
    elements, one cat + copy per `add`, and reduced together (`segmented`) when it
    fills and at `resolve()`, into the slots it reserved: deep graphs of small tensors cost
    a few kernels per node, not ~10 per tensor, and no gradient is kept alive for it. Larger
    CPU float32/16/bf16 gradients take three kernels a chunk (a float64 copy, its dot product,
    the min/max; `exact_squares`; two for norms only, `exact_sum`) whose 0-d results are
    finished together at the same flush.
    Other tensors queued twice while alive (a gradient seen as one node's output and the next
    one's input) are measured once.

    Example:
        >>> batch = NormBatch(torch.device("cpu"))
        >>> slots = batch.add([torch.tensor([3.0, 4.0]), torch.zeros(2)])
        >>> values = batch.resolve()
        >>> [batch.pair(values, s) for s in slots]
        [(5.0, 4.0), (0.0, 0.0)]
    """

    #: CPU tensors up to this many elements go to the pending buffer (segment reductions run
    #: several times slower per element than dot/aminmax: only tiny tensors gain) ...
    SMALL = 1 << 12
    #: ... which holds this many (2 MiB of float64, in cache) or `chunk_size`, if fewer
    PENDING = 1 << 18

    def __init__(self, device: torch.device) -> None:
        self.dtype = accumulation_dtype(device)
        self._chunks: list[torch.Tensor] = []
        self._size = 0
        # identity -> (the tensor, its slot, whether the slot holds its max |g| too)
        self._seen: dict[tuple, tuple[weakref.ref, int, bool]] = {}
        # (sum of squares, min, max) of the CPU tensors reduced this run, by identity: a
        # gradient's flow and the hook statistics of the same tensor share one reduction;
        # `_sums`: the sums of squares of those whose range nobody asked for yet
        self._parts: dict[tuple, tuple[weakref.ref, Parts]] = {}
        self._sums: dict[tuple, tuple[weakref.ref, torch.Tensor]] = {}
        self._unknown = torch.full((), float("nan"), dtype=self.dtype)  # a max not read
        # identity -> (the tensor, the rows outside which it is all zeros: `zero_outside`)
        self._rows: dict[tuple, tuple[weakref.ref, torch.Tensor]] = {}
        # within `add_counted`: identity (or ("id", id)) -> (gradient, its non-zero count from
        # the same pass)
        self._counting = False
        self._held: dict[tuple, torch.Tensor] = {}  # see `add_whole`
        self._counts: dict[tuple, tuple[weakref.ref, torch.Tensor]] = {}
        # within `add_counted`: its counts vector; `_tallies`: per copy into the pending buffer
        # meanwhile, (that vector, the tensors' positions in it, first element, lengths),
        # counted from the buffer at the flush
        self._tally: torch.Tensor | None = None
        self._tallies: list[tuple[torch.Tensor, Sequence[int], int, list[int]]] = []
        self.scratch = Scratch()
        self.syncs = 0
        # pending small CPU tensors: their float64 copies and lengths (slots reserved)
        self._buf: torch.Tensor | None = None
        self._used = 0
        self._lengths: list[int] = []
        # [index in _chunks, pairs]: runs of consecutive slots the buffer fills at the flush
        self._runs: list[list[int]] = []
        # per reserved slot pair, in order: from the buffer (True) or deferred (False)
        self._order: list[bool] = []
        # deferred CPU tensors: (sum of squares, min, max) 0-d tensors and repeats
        self._deferred: tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]] = (
            [],
            [],
            [],
        )
        self._repeats: list[int] = []
        self._open = False  # whether the last chunk is the last run (small tensors extend it)
        self._hole = torch.empty(0, dtype=self.dtype)  # a run's place in _chunks until _flush
        self._exact = {
            d for d in (torch.float32, torch.float16, torch.bfloat16) if squares_fit(d, self.dtype)
        }

    def add(self, grads: Sequence[torch.Tensor], norms_only: bool = False) -> list[int]:
        """Queue (L2 norm, max |g|) of each gradient; returns the slot of each pair.

        `norms_only`: only the norms are wanted (what flowed along the graph's edges): a large
        CPU or CUDA gradient skips the pass that reads its max |g| (NaN in its place, unless it
        is known anyway); the norm is as exact, and 0 exactly when every element is 0.
        """
        small = [self.small(g) for g in grads]
        if all(small):  # the common case in deep graphs: one copy, no per-tensor bookkeeping
            if not grads:
                return []
            xs = grads if type(grads) is list else list(grads)
            first = self._add_small(xs, range(len(grads)))
            return list(range(first, first + 2 * len(grads), 2))
        slots: list[int | None] = [None] * len(grads)
        fresh: list[tuple[int, torch.Tensor, tuple | None]] = []
        for i, g in enumerate(grads):
            if small[i]:
                continue  # expanded / transposed: the copy to the buffer reads them as they are
            key = _identity(g) if g.device.type != "cuda" else None  # fused there: no gain
            hit = self._seen.get(key) if key is not None else None
            usable = hit is not None and hit[0]() is not None and (hit[2] or norms_only)
            slots[i] = hit[1] if usable else None  # type: ignore[index]
            if slots[i] is None:
                fresh.append((i, g, key))
        if any(small):
            at = [i for i, is_small in enumerate(small) if is_small]
            first = self._add_small([grads[i] for i in at], at)
            for k, i in enumerate(at):
                slots[i] = first + 2 * k
        later = []
        for i, g, key in fresh:
            if self._deferrable(g):
                slots[i], full = self._defer(g, key, norms_only)
                if key is not None:
                    self._seen[key] = (weakref.ref(g), slots[i], full)  # type: ignore[assignment]
            else:
                later.append((i, g, key))
        if later:
            dense = [g.coalesce().values() if g.is_sparse else g for _, g, _ in later]
            maxes = not norms_only or dense[0].device.type != "cuda"  # elsewhere: read anyway
            for indices, pairs in norms_and_maxes(dense, self.dtype, self.scratch, maxes):
                start = self.add_vector(pairs)
                for k, j in enumerate(indices):
                    i, g, key = later[j]
                    slots[i] = start + 2 * k
                    if key is not None:
                        self._seen[key] = (weakref.ref(g), start + 2 * k, maxes)
        return slots  # type: ignore[return-value]

    def _deferrable(self, g: torch.Tensor) -> bool:
        """A dense CPU gradient whose squares are exact in the accumulator (not small)."""
        return g.is_cpu and g.dtype in self._exact and g.layout is torch.strided

    def _defer(self, g: torch.Tensor, key: tuple | None, norms_only: bool) -> tuple[int, bool]:
        """Reduce one gradient to 0-d partial results now (no gradient kept), finished with
        the pending buffer; its slot, and whether it holds the max |g| too. `key`: its
        `_identity`, under which what is reduced is shared within the run."""
        x, repeats = distinct(g)
        # the rows that can hold non-zeros, and one that holds zeros, of exactly this layout
        # (a view of another shape shares the measurement under `key`, never the rows)
        rows = _alive(self._rows, (key, _layout(g))) if self._rows and key is not None else None
        if rows is not None:
            x, repeats = g.index_select(0, rows), 1
        flat, key = x.reshape(-1), key if repeats == 1 else None  # repeats: not its own elements
        if norms_only:
            parts = self._sum_parts(g, flat, key)
        elif self._counting and _alive(self._parts, key) is None:
            total, lo, hi, nonzero = counted_squares(flat, self.dtype, self.scratch)
            parts = self._keep(key, g, (total, lo, hi))
            self._counts[_key_or_id(g, key)] = (
                weakref.ref(g),
                nonzero * repeats if repeats > 1 else nonzero,
            )
        else:
            parts = self._range_parts(g, flat, key)
        for have, part in zip(self._deferred, parts):
            have.append(part)
        self._repeats.append(repeats)
        return self._reserve(False, 1), parts[1] is not self._unknown

    def zero_outside(self, g: torch.Tensor, indices: torch.Tensor) -> None:
        """Note that the 2-d gradient `g` is exactly zero outside the rows `indices` (an
        embedding's weight gradient: only the looked-up rows are written), so that while `g`
        lives its norm, range and non-zero count are read from those rows and one zero row,
        not from the whole table. Only CPU gradients whose squares are exact, and only where
        the rows are fewer than half the table (else reading them all is as cheap).

        Example:
            >>> batch, g = NormBatch(torch.device("cpu")), torch.zeros(10_000, 2)
            >>> g[7] = torch.tensor([3.0, 4.0])
            >>> batch.zero_outside(g, torch.tensor([[7, 7]]))
            >>> slots, at = batch.add_counted([g])
            >>> values = batch.resolve()
            >>> batch.pair(values, slots[0]), values[at]
            ((5.0, 4.0), 2.0)
        """
        if not (self._deferrable(g) and g.dim() == 2 and indices.device == g.device):
            return
        key = _identity(g)
        if key is None or indices.is_floating_point() or indices.is_complex():
            return
        rows = indices.reshape(-1).unique()  # sorted
        if 2 * (rows.numel() + 1) >= g.shape[0]:
            return
        # the first row index not looked up: rows are sorted, so it is where they leave 0, 1, ...
        gaps = (rows != torch.arange(rows.numel(), device=rows.device)).nonzero()
        spare = int(gaps[0]) if gaps.numel() else rows.numel()
        rows = torch.cat([rows, rows.new_tensor([spare])])
        self._rows[(key, _layout(g))] = (weakref.ref(g), rows)

    def _sum_parts(self, g: torch.Tensor, flat: torch.Tensor, key: tuple | None) -> Parts:
        """(sum of squares, min, max) where the range is known this run, else (sum of
        squares, NaN, NaN): the sum computed once per live tensor, as in `exact_parts`."""
        parts = _alive(self._parts, key)
        if parts is not None:
            return parts
        total = _alive(self._sums, key)
        if total is None:
            total = exact_sum(flat, self.dtype, self.scratch)
            if key is not None:
                self._sums[key] = (weakref.ref(g), total)
        return total, self._unknown, self._unknown

    def exact_parts(self, g: torch.Tensor, owner: torch.Tensor | None = None) -> Parts:
        """(sum of squares in the accumulator, min, max) of a dense CPU float32/16/bf16 tensor
        without repeated (stride 0) elements, as 0-d tensors: reduced once per run per live
        tensor (`exact_squares`), whoever asks first (the flow or a hook's statistics).
        `owner`: the live tensor `g` was detached from (kept by weak reference).

        Example:
            >>> batch, g = NormBatch(torch.device("cpu")), torch.tensor([[3.0], [-4.0]])
            >>> batch.exact_parts(g) is batch.exact_parts(g.t())
            True
        """
        return self._range_parts(
            g if owner is None else owner, distinct(g)[0].reshape(-1), _identity(g)
        )

    def _range_parts(self, owner: torch.Tensor, flat: torch.Tensor, key: tuple | None) -> Parts:
        """`exact_parts` of `flat`, known under `key` while `owner` lives."""
        parts = _alive(self._parts, key)
        if parts is not None:
            return parts
        total = _alive(self._sums, key)
        if total is not None:  # the flow took its sum already: the range only
            return self._keep(key, owner, (total, *torch.aminmax(flat)))
        return self._keep(key, owner, exact_squares(flat, self.dtype, self.scratch))

    def _keep(self, key: tuple | None, owner: torch.Tensor, parts: Parts) -> Parts:
        if key is not None:
            self._parts[key] = (weakref.ref(owner), parts)
        return parts

    def _reserve(self, from_buffer: bool, count: int) -> int:
        """Reserve `count` slot pairs in the open run (opening one); the first slot."""
        if not self._open:
            self._chunks.append(self._hole)  # replaced by _flush
            self._runs.append([len(self._chunks) - 1, 0])
            self._open = True
        self._runs[-1][1] += count
        self._order += [from_buffer] * count
        first = self._size
        self._size += 2 * count
        return first

    def alone(self, g: torch.Tensor) -> bool:
        """A CPU gradient measured on its own, shared by identity (not the pending buffer's)."""
        return g.numel() > self.SMALL and self._deferrable(g)

    def small(self, g: torch.Tensor) -> bool:
        """A dense CPU gradient small enough for the pending buffer, with squares exact in it."""
        return (
            g.is_cpu
            and g.dtype in self._exact
            and g.layout is torch.strided
            and g.numel() <= self.SMALL
        )

    def _add_small(self, xs: list[torch.Tensor], at: Sequence[int]) -> int:
        """Copy small dense CPU tensors to the pending buffer (one cat and one copy per call,
        flushing it when full); the slot of the first pair, the others follow. `at`: each
        tensor's position in the counts vector of `add_counted`, if one is open."""
        first = self._size
        if self._buf is None:
            self._buf = torch.empty(min(chunk_size(xs[0].device), self.PENDING), dtype=self.dtype)
        lengths = [x.numel() for x in xs]
        start, cap, total = 0, self._buf.numel(), sum(lengths)
        if self._used + total <= cap:  # the common case: all fit
            self._copy_in(xs, lengths, total, at)
            return first
        while start < len(xs):
            end, total = len(xs), sum(lengths[start:])
            while self._used + total > cap and end > start:  # what fits now
                end -= 1
                total -= lengths[end]
            if end == start:  # full (any one tensor fits an empty buffer)
                self._flush()
                continue
            self._copy_in(xs[start:end], lengths[start:end], total, at[start:end])
            start = end
        return first

    def _copy_in(
        self, xs: list[torch.Tensor], lengths: list[int], total: int, at: Sequence[int]
    ) -> None:
        """Append tensors that fit to the pending buffer, their slots to the open run."""
        used = self._used
        flat = xs[0].reshape(-1) if len(xs) == 1 else torch._C._nn.flatten_dense_tensors(xs)
        self._buf[used : used + total].copy_(flat)  # type: ignore[index]
        if self._tally is not None:  # counted from the copy at the flush, not read again
            self._tallies.append((self._tally, at, used, lengths))
        self._used = used + total
        self._lengths += lengths
        self._reserve(True, len(xs))

    def _flush(self) -> None:
        """Reduce the pending buffer and finish the deferred tensors, into the runs of slots
        they reserved."""
        if self._tallies:  # before `segmented` overwrites the buffer
            for counts, at, start, lengths in self._tallies:
                values = self._buf[start : start + sum(lengths)]  # type: ignore[index]
                where = slice(at.start, at.stop) if isinstance(at, range) else list(at)
                counts[where] = _segment_nonzeros(values, lengths).to(counts.dtype)
            self._tallies = []
        if self._order:
            pairs = self._pending_pairs()
            for (index, _), part in zip(self._runs, pairs.split([2 * n for _, n in self._runs])):
                self._chunks[index] = part
            self._used, self._lengths, self._runs, self._order = 0, [], [], []
            self._deferred, self._repeats = ([], [], []), []
        self._open = False

    def _pending_pairs(self) -> torch.Tensor:
        """The pairs of every reserved slot, in order (buffer and deferred interleaved)."""
        from_buffer = deferred = None
        if self._lengths:
            assert self._buf is not None
            ones = [1] * len(self._lengths)
            from_buffer = segmented(self._buf[: self._used], self._lengths, ones)
        if self._repeats:
            deferred = finished_pairs(*self._deferred, self._repeats)
        if deferred is None or from_buffer is None:
            return deferred if from_buffer is None else from_buffer  # type: ignore[return-value]
        where = torch.tensor(self._order)
        out = torch.empty(len(self._order), 2, dtype=self.dtype)
        out[where] = from_buffer.view(-1, 2)
        out[~where] = deferred.view(-1, 2)
        return out.reshape(-1)

    def add_counted(self, grads: Sequence[torch.Tensor]) -> tuple[list[int], int]:
        """`add` and `add_nonzero_counts` of the same gradients (parameters' gradients after
        backward, left as they are): large CPU ones are counted in the pass that measures them.
        Returns the slot of each pair and the slot of the first count.

        Example:
            >>> batch = NormBatch(torch.device("cpu"))
            >>> g = torch.zeros(10_000); g[:3] = 2.0
            >>> slots, at = batch.add_counted([g])
            >>> values = batch.resolve()
            >>> batch.pair(values, slots[0]), values[at]
            ((3.4641016151377544, 2.0), 3.0)
        """
        small = [self.small(g) for g in grads]
        if sum(small) < 2 or not all(g.is_cpu for g in grads):
            self._counting = True
            try:
                slots = self.add(grads)
            finally:
                self._counting = False
            return slots, self.add_nonzero_counts(grads)
        # the small ones are counted from their copies in the pending buffer (`_flush`)
        counts = torch.empty(len(grads), dtype=self.dtype)
        self._counting, self._tally = True, counts
        try:
            if all(small):
                first = self._add_small(list(grads), range(len(grads)))
                slots = list(range(first, first + 2 * len(grads), 2))
            else:
                slots = self.add(grads)
        finally:
            self._counting, self._tally = False, None
        large = [i for i, is_small in enumerate(small) if not is_small]
        if large:
            counts[large] = torch.stack([self._nonzero(grads[i]) for i in large]).to(self.dtype)
        return slots, self.add_vector(counts)

    def add_whole(self, grads: Sequence[torch.Tensor]) -> None:
        """Measure in full and count now (norm, max |g|, non-zero count) large CPU gradients that
        are about to become a parameter's gradient (a Linear weight's, on its way through
        `t()`): measured where they flow, while in cache, so that `add_counted` finds them
        (by identity, any view) instead of reading them again. Their edge's `add` shares it.

        Example:
            >>> batch, g = NormBatch(torch.device("cpu")), torch.zeros(64, 128)
            >>> batch.add_whole([g])
            >>> batch.add_counted([g.t()])[0] == batch.add([g], norms_only=True)
            True
        """
        large = [g for g in grads if self.alone(g)]
        for g in large:  # measured afresh: a buffer a backward refills through `.data` (no
            key = _identity(g)  # version bump) must not lend an earlier content
            self._forget(key)
            # held until `add_leaf` or `resolve`: the Python object of a gradient in flight
            # dies with the hook (its weak references with it), though its memory lives on
            self._held[_key_or_id(g, key)] = g
        self._counting = True
        try:
            self.add(large)
        finally:
            self._counting = False

    def add_leaf(self, g: torch.Tensor) -> tuple[int, int]:
        """`add_counted` of one gradient as it reaches its parameter (trace/arrivals.py): the
        slot of its (norm, max |g|) pair and of its non-zero count, from what `add_whole`
        measured of the same tensor on its way there, if anything, else measured now. It is no
        longer held: the caller lets autograd drop it.

        Example:
            >>> batch, g = NormBatch(torch.device("cpu")), torch.zeros(64, 128)
            >>> g[0, :3] = 2.0
            >>> batch.add_whole([g])
            >>> pair, count = batch.add_leaf(g.t())
            >>> values = batch.resolve()
            >>> batch.pair(values, pair), values[count]
            ((3.4641016151377544, 2.0), 3.0)
        """
        slots, count = self.add_counted([g])
        self._held.pop(_key_or_id(g, _identity(g)), None)
        return slots[0], count

    def _forget(self, key: tuple | None) -> None:
        """Drop what was measured under `key` (the next `add` measures it again)."""
        for cache in (self._seen, self._parts, self._sums, self._counts):
            cache.pop(key, None)  # type: ignore[arg-type]

    def _counted(self, g: torch.Tensor) -> torch.Tensor | None:
        """The non-zero count of `g` measured this run (of any live view with its elements)."""
        key = _identity(g)
        known = _alive(self._counts, key) if key is not None else None
        if known is None:
            entry = self._counts.get(_key_or_id(g, None))
            known = entry[1] if entry is not None and entry[0]() is g else None
        return known

    def _nonzero(self, g: torch.Tensor) -> torch.Tensor:
        """The non-zero count of one gradient as a 0-d int64 tensor (measured this run, or now)."""
        known = self._counted(g)
        if known is not None:
            return known.long()  # exact: a count below 2^53
        x, repeats = distinct(g.coalesce().values() if g.is_sparse else g)
        return torch.count_nonzero(x) * repeats if repeats > 1 else torch.count_nonzero(x)

    def add_nonzero_counts(self, grads: Sequence[torch.Tensor]) -> int:
        """Queue the number of non-zero elements of each gradient (exact: counted in int64);
        returns the slot of the first count. Small CPU gradients are counted together."""
        if not grads:
            return self._size
        small = {i for i, g in enumerate(grads) if self.small(g)}
        small = small if len(small) > 1 else set()
        counts = []
        for i, g in enumerate(grads):
            if i in small:
                continue
            counts.append(self._nonzero(g))
        if not small:
            return self.add_vector(torch.stack(counts))
        chosen = [g for i, g in enumerate(grads) if i in small]
        flat = torch._C._nn.flatten_dense_tensors(chosen)
        together = _segment_nonzeros(flat, [g.numel() for g in chosen])
        if not counts:
            return self.add_vector(together)
        out = torch.empty(len(grads), dtype=torch.int64)
        out[sorted(small)] = together
        out[[i for i in range(len(grads)) if i not in small]] = torch.stack(counts).cpu()
        return self.add_vector(out)

    def add_scalar(self, value: torch.Tensor) -> int:
        """Queue any 0-d tensor (a loss value, a flag); returns its slot."""
        return self.add_vector(value.detach().reshape(1))

    def add_vector(self, values: torch.Tensor) -> int:
        """Queue a 1-d tensor; returns the slot of its first element."""
        self._open = False  # small tensors queued next start a new run
        start = self._size
        self._chunks.append(values.detach().to(self.dtype).reshape(-1))
        self._size += values.numel()
        return start

    def resolve(self) -> list[float]:
        """All queued numbers as Python floats: the single host synchronisation of a run."""
        self._flush()
        self._seen, self._parts, self._sums, self.scratch, self._buf = {}, {}, {}, Scratch(), None
        self._counts, self._rows, self._held = {}, {}, {}
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


Parts = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
T = TypeVar("T")


def _alive(cache: dict[tuple, tuple[weakref.ref, T]], key: tuple | None) -> T | None:
    """What `cache` holds under `key` while the tensor it was measured from lives."""
    hit = cache.get(key) if key is not None else None
    return hit[1] if hit is not None and hit[0]() is not None else None


def _segment_nonzeros(flat: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Non-zero counts (int64, exact; NaN counts) of consecutive segments of a 1-d CPU tensor:
    one comparison and one `np.add.reduceat` (several times faster than a bool cumsum)."""
    sizes = np.asarray(lengths, dtype=np.int64)
    out = np.zeros(len(lengths), dtype=np.int64)
    filled = sizes > 0  # reduceat reads one element for an empty segment: left at 0
    if filled.any():
        starts = np.cumsum(sizes) - sizes
        out[filled] = np.add.reduceat(flat.ne(0).numpy(), starts[filled], dtype=np.int64)
    return torch.from_numpy(out)


def _key_or_id(g: torch.Tensor, key: tuple | None) -> tuple:
    """`key` (g's `_identity`), or ("id", id(g)) for a tensor that shares nothing by identity:
    the key of what is kept of `g` while it lives."""
    return key if key is not None else ("id", id(g))


def _layout(g: torch.Tensor) -> tuple:
    return tuple(g.shape), g.stride()


def _identity(g: torch.Tensor) -> tuple | None:
    """What makes two live tensors hold the same values, in any order (None: do not share).

    A dense tensor (`reduce.dense`) holds the `numel()` elements from its first one, whatever
    its shape: a gradient and its views (the reshapes, transposes and permutes of attention
    heads, a Linear weight's `t()` on its way to the leaf) share one measurement, since norm,
    max |g| and counts do not depend on the order. Otherwise the same first element and the
    same (size, stride) pairs in any order address the same elements.

    Example:
        >>> g = torch.randn(3, 4)
        >>> _identity(g) == _identity(g.t()) == _identity(g.view(2, 6)), _identity(g) == _identity(g[1:])
        (True, False)
    """
    if g.layout != torch.strided or g.device.type == "meta":
        return None
    try:
        if dense(g):
            return (g.data_ptr(), g.dtype, g.numel(), g._version, g.device)
        dims = sorted((size, stride) for size, stride in zip(g.shape, g.stride()) if size != 1)
        return (g.data_ptr(), g.dtype, tuple(dims), g._version, g.device)
    except RuntimeError:  # tensors without storage (fake, functorch wrappers)
        return None
