"""Which parameters and inputs hold NaN/Inf values: asked only when a run met NaN/Inf (a
non-finite loss or gradient), so that the finding names the tensor it most likely started
from, not only the first graph node it reached. One extra host sync, in that case only."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import torch
from torch.utils._pytree import tree_leaves

K = TypeVar("K")

#: elements counted at once (bounds the temporary of `isfinite` on a large parameter)
CHUNK = 1 << 24


def floating_leaves(value: Any) -> list[torch.Tensor]:
    """The floating-point (and complex) tensors among `value`'s leaves (lists, tuples, dicts).

    Example:
        >>> [t.dtype for t in floating_leaves((torch.ones(1), {"n": torch.ones(1, dtype=torch.int64)}))]
        [torch.float32]
    """
    return [
        t
        for t in tree_leaves(value)
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
    ]


def all_finite(t: torch.Tensor) -> bool:
    """Whether every element of `t` is finite (an empty tensor is; one host sync)."""
    return bool(torch.isfinite(t).all()) if t.numel() else True


def nonfinite_holders(named: Iterable[tuple[K, torch.Tensor]]) -> list[tuple[K, int, int]]:
    """(name, non-finite elements, elements) of each floating tensor holding NaN/Inf, in one
    host sync.

    Example:
        >>> nonfinite_holders([("w", torch.tensor([1.0, float("nan")])), ("b", torch.ones(2))])
        [('w', 1, 2)]
    """
    pairs = list(named)
    counts = nonfinite_counts([t for _, t in pairs])
    return [(n, k, t.numel()) for (n, t), k in zip(pairs, counts) if k]


def nonfinite_counts(params: Sequence[torch.Tensor]) -> list[int]:
    """NaN/Inf elements of each tensor (0 for non-floating ones), in one host sync; a large
    tensor is counted in chunks of CHUNK elements (no temporary the size of a weight).

    Example:
        >>> nonfinite_counts([torch.tensor([1.0, float("inf"), float("nan")]), torch.ones(2)])
        [2, 0]
    """
    parts: list[torch.Tensor] = []
    where: list[int] = []
    with torch.no_grad():
        for i, p in enumerate(params):
            if not (p.is_floating_point() or p.is_complex()) or not p.numel():
                continue
            flat = p.detach().reshape(-1)
            for start in range(0, flat.numel(), CHUNK):
                part = flat[start : start + CHUNK]
                parts.append((~torch.isfinite(part)).sum())
                where.append(i)
    out = [0] * len(params)
    if parts:
        device = parts[0].device  # one read-back (parameters on several devices: copied there)
        for i, k in zip(where, torch.stack([c.to(device) for c in parts]).tolist()):
            out[i] += int(k)
    return out


def held_finding(kind: str, holders: list[tuple[str, int, int]]) -> str | None:
    """The sentence naming the parameters (or inputs) that hold NaN/Inf.

    Example:
        >>> held_finding("parameter", [("b.weight", 1, 12)])
        'parameter b.weight holds NaN/Inf (1 of 12 elements): non-finite values start there, not in an op'
    """
    if not holders:
        return None
    if len(holders) == 1:
        n, k, total = holders[0]
        return (
            f"{kind} {n} holds NaN/Inf ({k:,} of {total:,} elements): non-finite values start "
            "there, not in an op"
        )
    parts = [f"{n} ({k:,} of {total:,} elements)" for n, k, total in holders]
    shown = ", ".join(parts[:4]) + ("…" if len(parts) > 4 else "")
    return f"{len(holders)} {kind}s hold NaN/Inf: {shown}: non-finite values start there"
