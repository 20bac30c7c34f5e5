"""Which parameters and inputs hold NaN/Inf values: asked only when a run met NaN/Inf (a
non-finite loss or gradient), so that the finding names the tensor it most likely started
from, not only the first graph node it reached. One extra host sync, in that case only."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

import torch

K = TypeVar("K")


def nonfinite_holders(named: Iterable[tuple[K, torch.Tensor]]) -> list[tuple[K, int, int]]:
    """(name, non-finite elements, elements) of each floating tensor holding NaN/Inf, in one
    host sync.

    Example:
        >>> nonfinite_holders([("w", torch.tensor([1.0, float("nan")])), ("b", torch.ones(2))])
        [('w', 1, 2)]
    """
    floats = [(n, t) for n, t in named if t.is_floating_point() or t.is_complex()]
    if not floats:
        return []
    with torch.no_grad():
        counts = [(~torch.isfinite(t.detach())).sum() for _, t in floats]
        found = torch.stack([c.to(counts[0].device) for c in counts]).tolist()
    return [(n, int(k), t.numel()) for (n, t), k in zip(floats, found) if k]


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
