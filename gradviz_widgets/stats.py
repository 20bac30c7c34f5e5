"""Gradient norms computed on the device and read back in one host sync, and health statuses.

Norms accumulate in float64 (float32 on MPS, which has no float64): in float32 the squares of
gradients below ~1e-19 underflow and a vanishing layer would read exactly 0.0. "zero" is decided by
the elements (the largest |g| is exactly 0), never by the norm.
"""

from __future__ import annotations

import dataclasses
import math
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


class NormBatch:
    """Collects numbers as device tensors; `resolve()` reads them all back with one host sync.

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
        self.syncs = 0

    def add(self, grads: Sequence[torch.Tensor]) -> list[int]:
        """Queue (L2 norm, max |g|) of each gradient, one fused kernel per kind; returns slots."""
        if not grads:
            return []
        dense = [g.coalesce().values() if g.is_sparse else g for g in grads]
        if dense[0].device.type == "cpu":
            start = self.add_vector(torch.tensor(
                [v for g in dense for v in _cpu_norm_pair(g)], dtype=self.dtype))
            return list(range(start, start + 2 * len(grads), 2))
        l2 = torch._foreach_norm(dense, 2, dtype=self.dtype)
        linf = torch._foreach_norm(dense, math.inf)
        pairs = torch.stack([torch.stack(l2), torch.stack(linf).to(self.dtype)], dim=1)
        start = self.add_vector(pairs.flatten())
        return list(range(start, start + 2 * len(grads), 2))

    def add_nonzero_counts(self, grads: Sequence[torch.Tensor]) -> int:
        """Queue the number of non-zero elements of each gradient (one fused kernel); returns
        the slot of the first count."""
        if not grads:
            return self._size
        dense = [g.coalesce().values() if g.is_sparse else g for g in grads]
        return self.add_vector(torch.stack(torch._foreach_norm(dense, 0)))

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


#: float32 squares stay exact (no underflow, no overflow) for max |g| inside this range
_SAFE_FLOAT32 = (1e-18, 1e18)


def _cpu_norm_pair(g: torch.Tensor) -> tuple[float, float]:
    """(L2, max |g|) of a CPU tensor. On the CPU there is no device to wait for, so max |g| is
    read first and decides the accumulation: float32 where its squares are safe (the common
    case, ~20x cheaper than converting to float64), float64 where tiny or huge values would
    underflow or overflow (vanishing layers must not read 0.0)."""
    if g.numel() == 0:
        return 0.0, 0.0
    x, repeats = _distinct(g.abs() if g.is_complex() else g)
    lo, hi = torch.aminmax(x)
    top = max(-lo.item(), hi.item()) if not torch.isnan(lo) else math.nan
    safe = x.dtype in (torch.float32, torch.float16, torch.bfloat16) and \
        _SAFE_FLOAT32[0] < top < _SAFE_FLOAT32[1]
    norm = torch.linalg.vector_norm(x, dtype=torch.float32 if safe else torch.float64).item()
    return norm * math.sqrt(repeats), top


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
