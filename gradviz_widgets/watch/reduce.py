"""Per-step statistics of many gradient tensors, reduced where they live.

Three paths, chosen by where the tensors are and how big they are:

- CPU, small models (fewer than `SMALL` elements in all): the tensors are viewed as numpy arrays
  (no copy), concatenated once in float64 and reduced per tensor with `reduceat`: exact, and a
  handful of calls whatever the number of parameters.
- CPU, large models: per tensor, max |g| first (on the CPU reading it costs nothing), then the L2
  norm from float32 norms of 1,024-element blocks combined in float64 (relative error ~1e-11,
  ~10x cheaper than a float64 pass), or a float64 pass when max |g| says float32 squares would
  underflow or overflow.
- accelerators: fused `_foreach_norm` kernels accumulating in float64 (float32 on MPS); the
  result stays on the device; nothing here synchronises with the host.

Each path returns, per tensor, (L2 norm, max |g|, number of non-zero elements).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import torch

from ..stats import accumulation_dtype

#: total elements below which CPU tensors are reduced together in numpy
SMALL = 1 << 20
_BLOCK = 1024
#: float32 squares stay exact for max |g| inside this range (the explorer's rule, stats.py)
_SAFE = (1e-18, 1e18)
_NUMPY_DTYPES = (torch.float32, torch.float64, torch.float16)


def grad_stats(tensors: Sequence[torch.Tensor]) -> np.ndarray | torch.Tensor:
    """(n, 3) float64: L2 norm, max |g|, non-zero count of each tensor.

    A numpy array for CPU tensors, a tensor on the device otherwise (read it later).

    Example:
        >>> grad_stats([torch.tensor([3.0, -4.0]), torch.zeros(3)]).tolist()
        [[5.0, 4.0, 2.0], [0.0, 0.0, 0.0]]
    """
    if not tensors:
        return np.zeros((0, 3))
    device = tensors[0].device
    if device.type != "cpu":
        return _device_stats(tensors)
    if sum(t.numel() for t in tensors) < SMALL and all(t.dtype in _NUMPY_DTYPES for t in tensors):
        return _fused_numpy_stats(tensors)
    return np.array([_cpu_tensor_stats(t) for t in tensors], dtype=np.float64)


def param_norms(tensors: Sequence[torch.Tensor]) -> np.ndarray | torch.Tensor:
    """L2 norm of each tensor (for update ratios: ~1e-4 relative accuracy is plenty there).

    Example:
        >>> param_norms([torch.tensor([3.0, 4.0])]).tolist()
        [5.0]
    """
    if not tensors:
        return np.zeros(0)
    if tensors[0].device.type != "cpu":
        dtype = accumulation_dtype(tensors[0].device)
        return torch.stack(torch._foreach_norm(list(tensors), 2, dtype=dtype)).to(dtype)
    return np.array([n.item() for n in torch._foreach_norm(list(tensors), 2)], dtype=np.float64)


def flat_copy(tensors: Sequence[torch.Tensor]) -> np.ndarray:
    """The values of small CPU tensors in one float64 array (the update-ratio snapshot)."""
    return np.concatenate([_as_numpy(t) for t in tensors]).astype(np.float64)


def segment_norms(flat: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """L2 norm of each consecutive segment of `flat` (segments may be empty).

    Example:
        >>> segment_norms(np.array([3.0, 4.0, 1.0]), [2, 0, 1]).tolist()
        [5.0, 0.0, 1.0]
    """
    return np.sqrt(_segment_reduce(np.add, flat * flat, sizes))


def is_small_cpu(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether `grad_stats` and the update-ratio snapshot take the fused numpy path."""
    return bool(tensors) and tensors[0].device.type == "cpu" and \
        sum(t.numel() for t in tensors) < SMALL and all(t.dtype in _NUMPY_DTYPES for t in tensors)


def _as_numpy(t: torch.Tensor) -> np.ndarray:
    return (t.numpy() if not t.requires_grad else t.detach().numpy()).ravel()


@functools.lru_cache(maxsize=64)
def _starts(sizes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    arr = np.asarray(sizes, dtype=np.int64)
    present = arr > 0
    return present, np.concatenate([[0], np.cumsum(arr)[:-1]])[present]


def _segment_reduce(ufunc: np.ufunc, values: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    present, starts = _starts(tuple(sizes))
    out = np.zeros(len(present), dtype=np.float64)
    if len(starts):
        out[present] = ufunc.reduceat(values, starts)
    return out


def _fused_numpy_stats(tensors: Sequence[torch.Tensor]) -> np.ndarray:
    flat = flat_copy(tensors)
    sizes = [t.numel() for t in tensors]
    out = np.empty((len(tensors), 3), dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        out[:, 0] = np.sqrt(_segment_reduce(np.add, flat * flat, sizes))
        out[:, 1] = _segment_reduce(np.maximum, np.abs(flat), sizes)
        out[:, 2] = _segment_reduce(np.add, (flat != 0).astype(np.float64), sizes)
    return out


def _cpu_tensor_stats(g: torch.Tensor) -> tuple[float, float, float]:
    """(L2, max |g|, non-zeros) of one CPU tensor: max |g| first, it picks the accumulation."""
    x = g.detach().reshape(-1)
    if x.is_complex():
        x = x.abs()
    if x.numel() == 0:
        return 0.0, 0.0, 0.0
    lo, hi = torch.aminmax(x)
    top = math.nan if torch.isnan(lo) or torch.isnan(hi) else max(-lo.item(), hi.item())
    nonzero = float(torch.count_nonzero(x).item())
    if top == 0.0:
        return 0.0, 0.0, nonzero
    if x.dtype in (torch.float32, torch.float16, torch.bfloat16) and _SAFE[0] < top < _SAFE[1]:
        whole = x.numel() // _BLOCK * _BLOCK
        parts = [torch.linalg.vector_norm(x[:whole].view(-1, _BLOCK), dim=1, dtype=torch.float32)]
        if whole < x.numel():
            parts.append(torch.linalg.vector_norm(x[whole:], dtype=torch.float32).reshape(1))
        norm = torch.linalg.vector_norm(torch.cat(parts).double()).item()
    else:
        norm = torch.linalg.vector_norm(x, dtype=torch.float64).item()
    return norm, top, nonzero


def _device_stats(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Fused kernels on the tensors' device; nothing is read back here."""
    dtype = accumulation_dtype(tensors[0].device)
    dense = [t.detach() for t in tensors]
    l2 = torch.stack(torch._foreach_norm(dense, 2, dtype=dtype)).to(dtype)
    linf = torch.stack(torch._foreach_norm(dense, math.inf)).to(dtype)
    try:  # one fused kernel; float64 counts are exact to 2^53 elements
        nonzero = torch.stack(torch._foreach_norm(dense, 0, dtype=dtype)).to(dtype)
    except (RuntimeError, TypeError):
        nonzero = torch.stack([torch.count_nonzero(t) for t in dense]).to(dtype)
    return torch.stack([l2, linf, nonzero], dim=1)
