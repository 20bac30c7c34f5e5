"""The numbers of a watch page: an Overview squeezed to at most `max_steps` buckets and packed.

Per (parameter, bucket) the page needs the bucket's largest and smallest finite norm, the steps
where they happened and the most alarming status (the live view's min/max rule, history.py).
Norms are written once as text by Python (3 significant digits, like the live view's hover) into
a sorted table; cells hold indices into it. The arrays are packed little-endian, zlib-compressed
and base64-encoded; the page inflates them with the browser's DecompressionStream. 1,000
parameters x 400 buckets as JSON text would be ~10 MB; packed it is ~1-2 MB.
"""

from __future__ import annotations

import base64
import zlib
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..vocabulary import format_norm
from .history import EMPTY, SEVERITY_RANK, Overview


def merge_buckets(ov: Overview, max_steps: int) -> Overview:
    """The same overview with neighbouring buckets merged until at most `max_steps` are used
    (largest stays largest, smallest stays smallest, the worst status wins).

    Example:
        >>> ov = Overview(8)
        >>> for s in range(8):
        ...     ov.add(s, np.array([float(s + 1)]), np.array([3], dtype=np.uint8))
        >>> small = merge_buckets(ov, 2)
        >>> small.used, small.width, small.hi[:2, 0].tolist(), small.hi_step[:2, 0].tolist()
        (2, 4, [4.0, 8.0], [3, 7])
    """
    k = -(-ov.used // max(max_steps, 1))
    if k <= 1:
        return ov
    used = -(-ov.used // k)
    pad = used * k - ov.used

    def grouped(a: np.ndarray, fill: float) -> np.ndarray:
        a = a[: ov.used]
        a = np.concatenate([a, np.full((pad, a.shape[1]), fill, dtype=a.dtype)])
        return a.reshape(used, k, a.shape[1])

    out = Overview(max(2, used + used % 2))
    out.first, out.width, out.used = ov.first, ov.width * k, used
    out._alloc(ov.n_params)
    hi, lo = grouped(ov.hi, np.nan), grouped(ov.lo, np.nan)
    with np.errstate(invalid="ignore"):
        top = np.argmax(np.where(np.isfinite(hi), hi, -np.inf), axis=1)
        low = np.argmin(np.where(np.isfinite(lo), lo, np.inf), axis=1)
    pick = np.take_along_axis
    out.hi[:used] = pick(hi, top[:, None], 1)[:, 0]
    out.lo[:used] = pick(lo, low[:, None], 1)[:, 0]
    out.hi_step[:used] = pick(grouped(ov.hi_step, 0), top[:, None], 1)[:, 0]
    out.lo_step[:used] = pick(grouped(ov.lo_step, 0), low[:, None], 1)[:, 0]
    status = grouped(ov.status, EMPTY)
    worst = np.argmax(SEVERITY_RANK[status], axis=1)
    out.status[:used] = pick(status, worst[:, None], 1)[:, 0]
    return out


def norm_table(values: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Each positive finite value rounded to 3 significant digits: the sorted table of their
    texts (`vocabulary.format_norm`, the text used everywhere else) and, per value, 1 + its index in the table (0: no value).

    Example:
        >>> table, codes = norm_table(np.array([1234.5, np.nan, 0.000123456, 1230.0]))
        >>> table, codes.tolist()
        (['0.000123', '1230'], [2, 0, 1, 2])
    """
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = np.isfinite(v) & (v > 0)
        e = np.floor(np.log10(np.where(ok, v, 1.0))).astype(np.int64)
        m = np.round(np.where(ok, v, 1.0) / 10.0 ** (e - 2)).astype(np.int64)
    carry = m >= 1000
    e, m = np.where(carry, e + 1, e), np.where(carry, m // 10, m)
    key = np.where(ok, (e + 400) * 1000 + m, -1)
    uniq, inverse = np.unique(key, return_inverse=True)
    inverse = inverse.reshape(v.shape)
    texts = [format_norm(int(k) % 1000 * 10.0 ** (int(k) // 1000 - 402)) for k in uniq if k >= 0]
    shift = 0 if uniq.size and uniq[0] < 0 else 1
    codes = np.where(ok, inverse + shift, 0)
    return texts, codes.astype(np.uint32)


def pack(arrays: list[np.ndarray]) -> str:
    """uint32 arrays split into byte planes (all lowest bytes, then the next ...: the mostly
    zero high bytes compress to nothing), then uint8 arrays; zlib-compressed, base64 text."""
    parts = []
    for a in arrays:
        if a.dtype == np.uint32:
            parts.append(
                np.ascontiguousarray(a.astype("<u4").reshape(-1).view(np.uint8).reshape(-1, 4).T)
            )
        else:
            parts.append(np.ascontiguousarray(a.astype(np.uint8)))
    raw = b"".join(p.tobytes() for p in parts)
    return base64.b64encode(zlib.compress(raw, 6)).decode("ascii")


def deltas(codes: np.ndarray) -> np.ndarray:
    """Per row, the change from the previous bucket's code, zigzag-coded (small either way).

    Example:
        >>> deltas(np.array([[5, 6, 4]], dtype=np.uint32)).tolist()
        [[10, 2, 3]]
    """
    c = codes.astype(np.int64)
    d = np.diff(c, axis=-1, prepend=0)
    return np.where(d >= 0, 2 * d, -2 * d - 1).astype(np.uint32)


#: how many skipped steps the summary names (the rest are counted)
SKIPPED_NAMED = 8


def skipped_info(steps: Iterable[int], first: int, width: int, used: int) -> dict[str, Any]:
    """The steps a GradScaler skipped (their Inf/NaN gradients were not applied), for one
    drawing: how many, the first few, and per bucket holding any, [bucket, how many of its
    steps were skipped, the first of them] (steps outside the buckets are counted only).

    Example:
        >>> skipped_info([90, 20, 21, 20], first=0, width=10, used=12)
        {'count': 3, 'first': [20, 21, 90], 'buckets': [[2, 2, 20], [9, 1, 90]]}
        >>> skipped_info([], first=0, width=1, used=5)
        {'count': 0, 'first': [], 'buckets': []}
    """
    all_steps = np.unique(np.fromiter((int(s) for s in steps), dtype=np.int64))
    inside = all_steps[(all_steps >= first) & (all_steps < first + used * max(width, 1))]
    bucket = (inside - first) // max(width, 1)
    keys, start, counts = np.unique(bucket, return_index=True, return_counts=True)
    return {
        "count": int(all_steps.size),
        "first": all_steps[:SKIPPED_NAMED].tolist(),
        "buckets": [
            [int(b), int(n), int(inside[i])] for b, i, n in zip(keys, start, counts, strict=True)
        ],
    }


def view_data(
    ov: Overview, order: list[int], label: str, skipped: Iterable[int] = ()
) -> dict[str, Any]:
    """One rank's (or the only) drawing: bucket geometry, the text table and the packed cells
    (parameter-major, rows in `order`): hi code, lo code (as deltas), hi step offset, lo step
    offset (uint32, byte planes), then status (uint8); and the steps a GradScaler `skipped`
    (skipped_info)."""
    used = ov.used
    cols = np.asarray(order, dtype=np.int64)
    cols = cols[cols < ov.n_params]
    hi, lo = ov.hi[:used][:, cols].T, ov.lo[:used][:, cols].T
    table, codes = norm_table(np.stack([hi, lo]))
    start = (ov.first or 0) + np.arange(used, dtype=np.int64) * ov.width
    hi_off = np.clip(ov.hi_step[:used][:, cols].T - start, 0, None).astype(np.uint32)
    lo_off = np.clip(ov.lo_step[:used][:, cols].T - start, 0, None).astype(np.uint32)
    status = ov.status[:used][:, cols].T.astype(np.uint8)
    missing = len(order) - len(cols)
    if missing:  # parameters the overview has not seen yet: no record
        extra = np.zeros((missing, used), dtype=np.uint32)
        codes = np.concatenate([codes, np.stack([extra, extra])], axis=1)
        hi_off, lo_off = np.vstack([hi_off, extra]), np.vstack([lo_off, extra])
        status = np.vstack([status, np.full((missing, used), EMPTY, dtype=np.uint8)])
    return {
        "label": label,
        "first": int(ov.first or 0),
        "width": int(ov.width),
        "buckets": int(used),
        "table": table,
        "cells": pack([deltas(codes[0]), deltas(codes[1]), hi_off, lo_off, status]),
        "skipped": skipped_info(skipped, int(ov.first or 0), int(ov.width), int(used)),
    }
