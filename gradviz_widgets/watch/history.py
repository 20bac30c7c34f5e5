"""Reading a record back: the history table, min/max downsampling and the bucketed overview.

A chart of 100,000 steps has a few hundred pixels; averaging steps into them would hide the one
step that exploded. Both reductions here keep, per bucket, the smallest and the largest finite
value (where they happened) and the most alarming status, so no spike and no dip disappears.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..vocabulary import SEVERITY_OVER_TIME, STATUSES
from .events import REASONS, Event, reason_codes
from .steptable import step_columns
from .store import FLOATS, Chunk, ParamInfo

if TYPE_CHECKING:
    import pandas as pd

#: how alarming a status is when several share a bucket (higher wins), by status code:
#: vocabulary.SEVERITY_OVER_TIME (a None ranks above vanishing over time); index
#: len(STATUSES) is a bucket without data
SEVERITY_RANK = np.array(
    [len(SEVERITY_OVER_TIME) - 1 - SEVERITY_OVER_TIME.index(s) for s in STATUSES] + [-1]
)
EMPTY = len(STATUSES)
#: history() columns; the last three are step-wide (watch/steptable.py)
COLUMNS = [
    "step",
    "rank",
    "param",
    "module",
    "norm",
    "max_abs",
    "zero_fraction",
    "status",
    "reason",
    "update_ratio",
    "skipped",
    "scale",
    "clipped",
]


def minmax_downsample(
    steps: Sequence[int] | np.ndarray, values: Sequence[float] | np.ndarray, n_buckets: int
) -> tuple[np.ndarray, np.ndarray]:
    """At most ~3 points per bucket: the smallest and largest finite value (in step order) and
    the first non-finite one, so spikes, dips and NaNs all survive zooming out.

    Example:
        >>> s, v = minmax_downsample(range(8), [1, 9, 1, 1, 1, 0.5, 1, 1], 2)
        >>> s.tolist(), v.tolist()
        ([0, 1, 4, 5], [1.0, 9.0, 1.0, 0.5])
    """
    steps = np.asarray(steps)
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if n <= 2 * n_buckets or n_buckets <= 0:
        return steps.copy(), values.copy()
    bounds = np.linspace(0, n, n_buckets + 1).astype(np.int64)
    keep: list[int] = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        part = values[lo:hi]
        finite = np.isfinite(part)
        if finite.any():
            masked_hi = np.where(finite, part, -np.inf)
            masked_lo = np.where(finite, part, np.inf)
            keep += [lo + int(np.argmin(masked_lo)), lo + int(np.argmax(masked_hi))]
        if not finite.all():
            keep.append(lo + int(np.argmin(finite)))
    order = np.unique(np.array(keep, dtype=np.int64))
    return steps[order], values[order]


class Overview:
    """Per (bucket of steps, parameter): largest and smallest finite positive norm, the steps
    where they happened, and the most alarming status. Built incrementally (the live view) or
    from stored chunks; when the buckets fill up, neighbours merge and buckets get twice as wide.
    """

    def __init__(self, n_buckets: int = 400) -> None:
        self.n_buckets = n_buckets - n_buckets % 2
        self.width = 1
        self.first: int | None = None
        self.used = 0
        self._alloc(0)

    def _alloc(self, n_params: int) -> None:
        shape = (self.n_buckets, n_params)
        self.hi = np.full(shape, np.nan)
        self.lo = np.full(shape, np.nan)
        self.hi_step = np.zeros(shape, dtype=np.int64)
        self.lo_step = np.zeros(shape, dtype=np.int64)
        self.status = np.full(shape, EMPTY, dtype=np.uint8)

    @property
    def n_params(self) -> int:
        return self.hi.shape[1]

    def _grow(self, n_params: int) -> None:
        old: tuple[np.ndarray, ...] = (self.hi, self.lo, self.hi_step, self.lo_step, self.status)
        k = self.n_params
        self._alloc(n_params)
        fresh: tuple[np.ndarray, ...] = (self.hi, self.lo, self.hi_step, self.lo_step, self.status)
        for new, prev in zip(fresh, old):
            new[:, :k] = prev

    def add(self, step: int, norm: np.ndarray, status: np.ndarray) -> None:
        """One step: `norm` and `status` (indices into STATUSES) per parameter."""
        if self.first is None:
            self.first = step
        if len(norm) > self.n_params:
            self._grow(len(norm))
        b = (step - self.first) // self.width
        while b >= self.n_buckets:
            self._halve()
            b = (step - self.first) // self.width
        if b < 0:
            return
        self._merge_row(b, norm, np.full(len(norm), step), norm, np.full(len(norm), step), status)
        self.used = max(self.used, b + 1)

    def add_many(self, steps: np.ndarray, norm: np.ndarray, status: np.ndarray) -> None:
        """`add` for (steps, params) rows, ascending steps: one merge per bucket they fall in."""
        i = 0
        while i < len(steps):
            if self.first is None:
                self.first = int(steps[i])
            if norm.shape[1] > self.n_params:
                self._grow(norm.shape[1])
            b = (int(steps[i]) - self.first) // self.width
            while b >= self.n_buckets:
                self._halve()
                b = (int(steps[i]) - self.first) // self.width
            j = i + int(np.searchsorted(steps[i:], self.first + (b + 1) * self.width))
            if b >= 0:
                self._merge_rows(b, steps[i:j], norm[i:j], status[i:j])
                self.used = max(self.used, b + 1)
            i = j

    def _merge_rows(self, b: int, steps: np.ndarray, norm: np.ndarray, status: np.ndarray) -> None:
        with np.errstate(invalid="ignore"):
            ok = np.isfinite(norm) & (norm > 0)
        cols = np.arange(norm.shape[1])
        top = np.argmax(np.where(ok, norm, -np.inf), axis=0)  # first of the largest
        low = np.argmin(np.where(ok, norm, np.inf), axis=0)
        any_ok = ok.any(axis=0)
        hi = np.where(any_ok, norm[top, cols], np.nan)
        lo = np.where(any_ok, norm[low, cols], np.nan)
        worst = status[np.argmax(SEVERITY_RANK[status], axis=0), cols]
        self._merge_row(b, hi, steps[top], lo, steps[low], worst)

    def add_chunk(self, chunk: Chunk, starts: Sequence[int] | np.ndarray | None = None) -> None:
        """A stored chunk's steps. `starts`: each parameter's first step (ParamInfo.first_step);
        its cells before it are no record, as in history(), whatever the chunk holds there (a
        chunk widened for a parameter added later reads "none" there: store.Chunk.widened)."""
        norm, status = chunk.norm, chunk.status
        if starts is not None:
            before = no_record_mask(chunk.steps, starts, norm.shape[1])
            norm = np.where(before, np.nan, norm)
            status = np.where(before, EMPTY, status).astype(np.uint8)
        for i, step in enumerate(chunk.steps.tolist()):
            self.add(step, norm[i], status[i])

    def _merge_row(
        self,
        b: int,
        hi: np.ndarray,
        hi_step: np.ndarray,
        lo: np.ndarray,
        lo_step: np.ndarray,
        status: np.ndarray,
    ) -> None:
        k = len(hi)
        with np.errstate(invalid="ignore"):
            ok_hi = np.isfinite(hi) & (hi > 0) & ~(hi <= self.hi[b, :k])
            ok_lo = np.isfinite(lo) & (lo > 0) & ~(lo >= self.lo[b, :k])
        self.hi[b, :k] = np.where(ok_hi, hi, self.hi[b, :k])
        self.hi_step[b, :k] = np.where(ok_hi, hi_step, self.hi_step[b, :k])
        self.lo[b, :k] = np.where(ok_lo, lo, self.lo[b, :k])
        self.lo_step[b, :k] = np.where(ok_lo, lo_step, self.lo_step[b, :k])
        worse = SEVERITY_RANK[status] > SEVERITY_RANK[self.status[b, :k]]
        self.status[b, :k] = np.where(worse, status, self.status[b, :k])

    def _halve(self) -> None:
        half = self.n_buckets // 2
        old = (
            self.hi.copy(),
            self.lo.copy(),
            self.hi_step.copy(),
            self.lo_step.copy(),
            self.status.copy(),
        )
        self._alloc(self.n_params)
        for j in range(half):
            for src in (2 * j, 2 * j + 1):
                hi, lo, hs, ls, st = (a[src] for a in old)
                self._merge_row(j, hi, hs, lo, ls, st)
        self.width *= 2
        self.used = (self.used + 1) // 2

    def bucket_steps(self) -> np.ndarray:
        """The first step of each used bucket."""
        return (self.first or 0) + np.arange(self.used) * self.width

    def cell_values(self) -> np.ndarray:
        """(buckets, params): the smallest norm where the bucket's status is vanishing, else the
        largest (a dip below the vanishing line shows as one; a spike as one)."""
        van = self.status[: self.used] == STATUSES.index("vanishing")
        return np.where(van, self.lo[: self.used], self.hi[: self.used])

    def series(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Min and max points of parameter j per bucket, in step order, and a NaN point (a gap
        in the line) at the start of each bucket where its gradient was NaN/Inf: the line
        breaks there instead of running straight through (the offline page breaks it too)."""
        bad = np.flatnonzero(self.status[: self.used, j] == STATUSES.index("nonfinite"))
        gaps = (self.first or 0) + bad * self.width
        lo, hi = self.lo[: self.used, j], self.hi[: self.used, j]
        keep_lo, keep_hi = np.isfinite(lo), np.isfinite(hi)
        # gaps first: at a step a gap shares with a finite point, the gap is the one kept
        lo_at, hi_at = self.lo_step[: self.used, j][keep_lo], self.hi_step[: self.used, j][keep_hi]
        steps = np.concatenate([gaps, lo_at, hi_at])
        vals = np.concatenate([np.full(len(gaps), np.nan), lo[keep_lo], hi[keep_hi]])
        order = np.argsort(steps, kind="stable")
        steps, vals = steps[order], vals[order]
        first = np.ones(len(steps), dtype=bool)
        first[1:] = steps[1:] != steps[:-1]
        return steps[first], vals[first]


def no_record_mask(
    steps: np.ndarray, starts: Sequence[int] | np.ndarray, n_params: int
) -> np.ndarray:
    """(steps, params): True where a step comes before the parameter's first step (it did not
    exist yet: no record, never a status). Parameters without a known start are never masked.

    Example:
        >>> no_record_mask(np.array([3, 4, 5]), [0, 5], 2).tolist()
        [[False, True], [False, True], [False, False]]
    """
    first = np.full(n_params, np.iinfo(np.int64).min, dtype=np.int64)
    known = np.asarray(starts, dtype=np.int64)[:n_params]
    first[: len(known)] = known
    return np.asarray(steps, dtype=np.int64)[:, None] < first[None, :]


def history_frame(
    params: list[ParamInfo],
    chunks: Iterable[Chunk],
    exact: list[tuple[int, int, int, float]],
    names: Sequence[str] | None = None,
    start: int | None = None,
    stop: int | None = None,
    rank: int = 0,
    step_rows: Sequence[tuple] = (),
    events: Sequence[Event] = (),
    partly: Sequence[tuple[int, int]] = (),
) -> pd.DataFrame:
    """One row per (step, parameter); `names` picks parameters, [start, stop) picks steps;
    `rank`: who recorded them (0: one process); `step_rows`: the store's `steps` table;
    `events` give the `reason` of a None row ("frozen", "removed" or "no gradient");
    `partly`: (step, param id) skipped while the step as a whole was not (store.partly_skipped)."""
    import pandas as pd  # only readers need it

    n = len(params)
    wanted = (
        np.arange(n)
        if names is None
        else np.array([p.id for p in params if p.name in set(names)], dtype=np.int64)
    )
    blocks = _blocks(chunks, n, start, stop)
    if not blocks:
        kinds: dict = {"param": object, "module": object, "status": object, "rank": int}
        kinds |= {"reason": object, "skipped": bool, "clipped": "boolean"}
        return pd.DataFrame({k: pd.Series(dtype=kinds.get(k, float)) for k in COLUMNS})
    cols = {
        k: np.concatenate([getattr(c, k)[rows][:, wanted].reshape(-1) for c, rows in blocks])
        for k in ("norm", "max_abs", "zero_fraction", "update_ratio", "status")
    }
    steps = np.concatenate([np.repeat(c.steps[rows], len(wanted)) for c, rows in blocks])
    ids = np.tile(wanted, len(steps) // max(len(wanted), 1))
    _apply_exact(cols, steps, ids, exact, n)
    none = cols["status"] == STATUSES.index("none")
    for k in ("norm", "max_abs"):
        cols[k] = np.where(none, np.nan, cols[k])
    reason = reason_codes(list(events), [params[i].name for i in wanted], steps, none)
    positions = np.tile(np.arange(len(wanted)), len(steps) // max(len(wanted), 1))
    first = np.array([p.first_step for p in params], dtype=np.int64)
    live = steps >= first[ids]  # a parameter added later has no rows before it appeared
    return pd.DataFrame(
        {
            "step": steps[live],
            "rank": np.full(int(live.sum()), rank, dtype=np.int64),
            "param": pd.Categorical.from_codes(ids[live], [p.name for p in params]),
            "module": pd.Categorical([params[i].module for i in wanted])[positions[live]],
            **{k: cols[k][live] for k in ("norm", "max_abs", "zero_fraction")},
            "status": pd.Categorical.from_codes(
                cols["status"][live].astype(np.int64), list(STATUSES)
            ),
            "reason": pd.Categorical.from_codes(reason[live], list(REASONS)),
            "update_ratio": cols["update_ratio"][live],
            **step_columns(steps[live], step_rows, ids[live], partly),
        }
    )


def _blocks(
    chunks: Iterable[Chunk], n: int, start: int | None, stop: int | None
) -> list[tuple[Chunk, np.ndarray]]:
    """The chunks (widened to n parameters) with a mask of their steps inside [start, stop)."""
    blocks = []
    for chunk in chunks:
        c = chunk.widened(n)
        rows = np.ones(len(c.steps), dtype=bool)
        if start is not None:
            rows &= c.steps >= start
        if stop is not None:
            rows &= c.steps < stop
        if rows.any():
            blocks.append((c, rows))
    return blocks


def _apply_exact(
    cols: dict[str, np.ndarray],
    steps: np.ndarray,
    ids: np.ndarray,
    exact: list[tuple[int, int, int, float]],
    n: int,
) -> None:
    """Put back the float64 values float32 could not hold."""
    if not exact or not len(steps):
        return
    key = steps * (n + 1) + ids
    order = np.argsort(key)
    for step, param, col, value in exact:
        pos = np.searchsorted(key, step * (n + 1) + param, sorter=order)
        if pos < len(order) and key[order[pos]] == step * (n + 1) + param:
            cols[FLOATS[col]][order[pos]] = value
