"""Per-step statistics of many gradient tensors, reduced where they live.

Three paths, chosen by where the tensors are and how big they are:

- CPU, small models (fewer than `SMALL` elements in all): the tensors are viewed as numpy arrays
  (no copy), concatenated once in float64 and reduced per tensor with `reduceat`: exact, and a
  handful of calls whatever the number of parameters.
- CPU, large models: per float32/16/bf16 tensor one pass, chunk by chunk (`counted_squares`:
  a float64 copy of the chunk, exact squares summed in float64, min/max and non-zero count
  while the chunk is in cache), all read back at once. (Float32 norms of 1,024-element blocks
  were ~2x cheaper and off by up to ~2e-7 on an LM head's gradient: a stranger's try-out.)
- accelerators: fused `_foreach_norm` kernels accumulating in float64 (float32 on MPS); the
  result stays on the device; nothing here synchronises with the host.

float64 gradients, whose squares can overflow or underflow float64, are divided by a power of
two near their max |g| before squaring (`_wide_stats`; the small numpy path re-sums only the
tensors whose max |g| lies beyond 2^±480); complex ones are reduced as |z| in float64 (taken in
complex128). float32/16/bf16 gradients take no extra pass for either.

Each path returns, per tensor, (L2 norm, max |g|, number of non-zero elements).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from ..stats.norms import accumulation_dtype
from ..stats.reduce import Scratch, counted_squares, magnitudes, norms_and_maxes, squares_fit

#: total elements below which CPU tensors are reduced together in numpy
SMALL = 1 << 20
_BLOCK = 1024
_SCRATCH = Scratch()  # chunk-sized float64 buffers, per thread (stats/reduce.py)
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
    if any(t.layout != torch.strided for t in tensors):
        return _with_sparse(tensors)
    if not tensors[0].is_cpu:
        return _device_stats(tensors)
    sizes = tuple([t.numel() for t in tensors])
    if sum(sizes) < SMALL and all([t.dtype in _NUMPY_DTYPES for t in tensors]):
        return _fused_numpy_stats(tensors, sizes)
    return _cpu_large_stats(tensors)


def param_norms(tensors: Sequence[torch.Tensor]) -> np.ndarray | torch.Tensor:
    """L2 norm of each tensor: float64 (or float32 on MPS) accumulation on devices, float32
    1,024-element blocks combined in float64 on the CPU; float64 tensors scaled as in
    `_wide_stats` (finite at any magnitude); complex ones through their real view.

    Example:
        >>> param_norms([torch.tensor([3.0, 4.0])]).tolist()
        [5.0]
    """
    if not tensors:
        return np.zeros(0)
    # a complex tensor's real view: its sum of squares is sum |z|^2, each part exact
    xs = [torch.view_as_real(t.resolve_conj()) if t.is_complex() else t for t in tensors]
    wide = [i for i, x in enumerate(xs) if x.dtype == torch.float64]
    if not wide:
        return _narrow_norms(xs)
    narrow = sorted(set(range(len(xs))) - set(wide))
    parts = [(wide, _wide_norms([xs[i] for i in wide]))]
    if narrow:
        parts.append((narrow, _narrow_norms([xs[i] for i in narrow])))
    return in_order(len(xs), parts)


def _narrow_norms(xs: list[torch.Tensor]) -> np.ndarray | torch.Tensor:
    if xs[0].device.type != "cpu":
        dtype = accumulation_dtype(xs[0].device)
        return torch.stack(torch._foreach_norm(xs, 2, dtype=dtype)).to(dtype)
    return np.sqrt(block_sumsq(xs))


def _wide_norms(xs: list[torch.Tensor]) -> np.ndarray | torch.Tensor:
    """float64 norms, finite at any magnitude (see `_wide_stats`): numpy on the CPU."""
    rows = _scaled_pairs(xs, maxes=False)
    norms = torch.stack([r[0] for r in rows])
    return norms.numpy() if norms.is_cpu else norms


def in_order(n: int, parts: Sequence[tuple[Sequence[int], Any]]) -> Any:
    """Per-tensor results computed in parts (indices, values: numpy arrays, or tensors on one
    device) put back in order: numpy, or one device tensor (no host sync)."""
    if all(isinstance(v, np.ndarray) for _, v in parts):
        out = np.zeros((n, *parts[0][1].shape[1:]), dtype=np.float64)
        for idx, v in parts:
            out[list(idx)] = v
        return out
    rows: list[Any] = [None] * n
    for idx, v in parts:
        for i, row in zip(idx, v.unbind(0)):
            rows[i] = row
    return torch.stack(rows)


def by_device(
    fn: Callable[[list[torch.Tensor]], Any], tensors: Sequence[torch.Tensor], width: int = 0
) -> Any:
    """`fn` per device group, reassembled in order (one group, the usual case: no copy);
    `width`: columns of `fn`'s result (0: one value per tensor), for an empty list."""
    if not tensors:
        return np.zeros((0, width)) if width else np.zeros(0)
    devices = {t.device for t in tensors}
    if len(devices) == 1:
        return fn(list(tensors))
    parts: dict[torch.device, Any] = {}
    for d in devices:
        part = fn([t for t in tensors if t.device == d])
        parts[d] = iter(part.cpu().double().numpy() if isinstance(part, torch.Tensor) else part)
    return np.array([next(parts[t.device]) for t in tensors])


def flat_copy(tensors: Sequence[torch.Tensor], out: np.ndarray | None = None) -> np.ndarray:
    """The values of small CPU tensors in one float64 array (into `out` when given)."""
    arrays = [_as_numpy(t) for t in tensors]
    if out is None:
        return np.concatenate(arrays, dtype=np.float64)
    return np.concatenate(arrays, out=out)


def segment_norms(flat: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """L2 norm of each consecutive segment of `flat` (segments may be empty).

    Example:
        >>> segment_norms(np.array([3.0, 4.0, 1.0]), [2, 0, 1]).tolist()
        [5.0, 0.0, 1.0]
    """
    return np.sqrt(_segment_reduce(np.add, flat * flat, sizes))


def is_small_cpu(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether `grad_stats` and the update-ratio snapshot take the fused numpy path."""
    return (
        bool(tensors)
        and tensors[0].device.type == "cpu"
        and sum(t.numel() for t in tensors) < SMALL
        and all(t.dtype in _NUMPY_DTYPES for t in tensors)
    )


def block_sumsq(tensors: Sequence[torch.Tensor]) -> np.ndarray:
    """Sum of squares of each CPU tensor: float32 norms of blocks of up to 1,024 elements (a
    divisor of the size where one is large enough: one view, one kernel), squared and summed in
    float64 (relative error ~1e-7 at any size; one float32 accumulation over 38M elements is
    off by ~3e-3)."""
    plan = _block_plan(tuple(t.numel() for t in tensors))
    parts = []
    with torch.no_grad():
        for t, (block, whole) in zip(tensors, plan[0]):
            x = t.reshape(-1)
            if whole:
                parts.append(
                    torch.linalg.vector_norm(x[:whole].view(-1, block), dim=1, dtype=torch.float32)
                )
            if whole < len(x):  # a tail no block size divides: one more norm
                parts.append(torch.linalg.vector_norm(x[whole:], dtype=torch.float32).reshape(1))
        flat = torch.cat(parts).numpy().astype(np.float64) if parts else np.zeros(0)
    return _segment_reduce(np.add, flat * flat, plan[1])


@functools.lru_cache(maxsize=64)
def _block_plan(sizes: tuple[int, ...]) -> tuple[list[tuple[int, int]], tuple[int, ...]]:
    """Per size: (block, elements in whole blocks); and how many norms each size gives."""
    plan, counts = [], []
    for n in sizes:
        block = math.gcd(n, _BLOCK) if n else _BLOCK
        if block < 64 and n > _BLOCK:
            block = _BLOCK
        whole = n // block * block if block >= 64 or n <= _BLOCK else 0
        plan.append((block, whole))
        counts.append(whole // block + (whole < n))
    return plan, tuple(counts)


def _as_numpy(t: torch.Tensor) -> np.ndarray:
    return (t.numpy() if not t.requires_grad else t.detach().numpy()).reshape(-1)


@functools.lru_cache(maxsize=64)
def _starts(sizes: tuple[int, ...]) -> tuple[np.ndarray | None, np.ndarray]:
    arr = np.asarray(sizes, dtype=np.int64)
    present = arr > 0
    starts = np.concatenate([[0], np.cumsum(arr)[:-1]])[present]
    return (None if present.all() else present), starts


def _segment_reduce(
    ufunc: np.ufunc, values: np.ndarray, sizes: Sequence[int], dtype: type = np.float64
) -> np.ndarray:
    present, starts = _starts(tuple(sizes))
    if present is None:
        return ufunc.reduceat(values, starts, dtype=dtype)
    out: np.ndarray = np.zeros(len(present), dtype=dtype)
    if len(starts):
        out[present] = ufunc.reduceat(values, starts, dtype=dtype)
    return out


def _fused_numpy_stats(tensors: Sequence[torch.Tensor], sizes: tuple[int, ...]) -> np.ndarray:
    """One torch.cat (a copy in the gradients' dtype), then three `reduceat`s in float64: the
    fewest Python calls per step (this runs in the training thread at every step)."""
    present, starts = _starts(sizes)
    flat = torch.cat([t.reshape(-1) for t in tensors]).detach().numpy()
    out = np.zeros((len(tensors), 3), dtype=np.float64)
    if not len(starts):
        return out
    rows = slice(None) if present is None else present
    wide = flat.astype(np.float64)
    out[rows, 1] = np.maximum.reduceat(np.abs(wide), starts)
    if flat.dtype == np.float64:  # squares may overflow or underflow: fixed just below
        with np.errstate(invalid="ignore", over="ignore"):
            out[rows, 0] = np.sqrt(np.add.reduceat(wide * wide, starts))
        _rescale_rows(out, wide, sizes)
    else:  # float32/16 squares fit float64 (np.errstate costs more than the sums here)
        out[rows, 0] = np.sqrt(np.add.reduceat(wide * wide, starts))
    out[rows, 2] = np.add.reduceat(flat != 0, starts, dtype=np.int64)
    return out


#: float64 max |g| beyond which (or, above 0, below whose inverse) squares may overflow a
#: sum of up to 2^40 of them, or turn subnormal and lose bits
WIDE = 2.0**480


def _rescale_rows(out: np.ndarray, wide: np.ndarray, sizes: Sequence[int]) -> None:
    """The norms of the float64 tensors whose max |g| (`out[:, 1]`) is beyond 2^±480, summed
    again from their values divided by a power of two near max |g| (exact: only the
    exponent changes), in `out[:, 0]`. One comparison per tensor when none is."""
    top = out[:, 1]
    with np.errstate(invalid="ignore"):
        odd = np.flatnonzero(((top > WIDE) & (top < math.inf)) | ((top > 0) & (top < 1 / WIDE)))
    if not len(odd):
        return
    ends = np.cumsum(sizes)
    for i in odd.tolist():
        e = math.frexp(float(top[i]))[1]
        scaled = np.ldexp(wide[ends[i] - sizes[i] : ends[i]], -e)
        out[i, 0] = math.ldexp(math.sqrt(float(np.dot(scaled, scaled))), e)


def _cpu_large_stats(tensors: Sequence[torch.Tensor]) -> np.ndarray:
    """float32/16/bf16: one pass per tensor (`counted_squares`: each chunk copied to float64,
    where its squares and their sum are exact, its min/max and non-zero count read while it
    is in cache); float64 and complex: `_wide_stats`. One read-back."""
    flat = [t.detach().reshape(-1) for t in tensors]
    out = np.zeros((len(tensors), 3), dtype=np.float64)
    exact = [i for i, x in enumerate(flat) if _narrow(x) and x.numel()]
    if exact:
        f64 = torch.float64
        parts = torch.stack([torch.stack(counted_squares(flat[i], f64, _SCRATCH)) for i in exact])
        total, lo, hi, nonzero = parts.numpy().T
        with np.errstate(invalid="ignore"):
            out[exact] = np.stack([np.sqrt(total), np.maximum(-lo, hi), nonzero], axis=1)
    wide = [i for i, x in enumerate(flat) if not _narrow(x) and x.numel()]
    if wide:
        out[wide] = _wide_stats([flat[i] for i in wide]).numpy()
    return out


def _narrow(x: torch.Tensor) -> bool:
    """Whether `x` is real and its squares are exact in float64 (float32/16/bf16)."""
    return not x.is_complex() and squares_fit(x.dtype, torch.float64)


def _wide_stats(xs: Sequence[torch.Tensor]) -> torch.Tensor:
    """(n, 3) float64 on the tensors' device of float64 or complex tensors: the norm of the
    values divided by a power of two near max |g| (so squares neither overflow nor underflow;
    `stats.reduce.norms_and_maxes`), max |g| and the non-zero count; complex ones as |z| taken
    in complex128 (|z| of a complex64 in its own precision carries float32's error). No host
    sync.

    Example:
        >>> big = torch.tensor([3.0, -4.0, 0.0], dtype=torch.float64) * 2.0**700
        >>> norm, top, nonzero = _wide_stats([big])[0].tolist()
        >>> norm / 2.0**700, top / 2.0**700, nonzero
        (5.0, 4.0, 2.0)
    """
    mags = [magnitudes(x) if x.is_complex() else x for x in xs]
    rows = _scaled_pairs(mags, maxes=True)
    counts = torch.stack([torch.count_nonzero(m) for m in mags]).to(torch.float64)
    return torch.cat([torch.stack(rows), counts[:, None]], 1)


def _scaled_pairs(xs: Sequence[torch.Tensor], maxes: bool) -> list[torch.Tensor]:
    """[norm, max |g|] of each real tensor in float64, scaled as `_wide_stats` says (max |g|
    is NaN on CUDA without `maxes`)."""
    rows: list[Any] = [None] * len(xs)
    for members, pairs in norms_and_maxes(list(xs), torch.float64, _SCRATCH, maxes=maxes):
        for m, row in zip(members, pairs.view(-1, 2).unbind(0)):
            rows[m] = row
    return rows


def _with_sparse(tensors: Sequence[torch.Tensor]) -> np.ndarray | torch.Tensor:
    """Sparse gradients (`nn.Embedding(sparse=True)`): exact statistics of the coalesced values
    (duplicate indices summed first), counted over the dense shape; the dense ones as usual.

    Example:
        >>> i = torch.tensor([[0, 0, 2]])
        >>> g = torch.sparse_coo_tensor(i, torch.tensor([3.0, 1.0, -4.0]), (5,), check_invariants=True)
        >>> grad_stats([g, torch.ones(2)]).tolist()
        [[5.656854249492381, 4.0, 2.0], [1.4142135623730951, 1.0, 2.0]]
    """
    sparse = [i for i, t in enumerate(tensors) if t.layout != torch.strided]
    dense = [i for i, t in enumerate(tensors) if t.layout == torch.strided]
    values = [_sparse_values(tensors[i]) for i in sparse]
    parts = [grad_stats(values), grad_stats([tensors[i] for i in dense])]
    if any(isinstance(p, torch.Tensor) for p in parts):
        device = next(p.device for p in parts if isinstance(p, torch.Tensor))
        rows = [torch.as_tensor(p, device=device, dtype=torch.float64) for p in parts]
        return torch.cat(rows)[torch.as_tensor(sparse + dense, device=device).argsort()]
    out = np.concatenate(parts)
    return out[np.argsort(np.array(sparse + dense))]


def _sparse_values(t: torch.Tensor) -> torch.Tensor:
    """The stored values of a sparse tensor, each dense element once (coalesce: a new tensor,
    the gradient itself is not changed)."""
    if t.layout == torch.sparse_coo:
        return (t if t.is_coalesced() else t.coalesce()).values().detach()
    return t.detach().values() if t.layout == torch.sparse_csr else t.detach().to_dense()


def _device_stats(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """Fused kernels on the tensors' device (float64 and complex ones: `_wide_stats`); nothing
    is read back here."""
    dense = [t.detach() for t in tensors]
    wide = [i for i, t in enumerate(dense) if t.is_complex() or t.dtype == torch.float64]
    if wide:
        rest = sorted(set(range(len(dense))) - set(wide))
        parts = [(wide, _wide_stats([dense[i] for i in wide]))]
        if rest:
            parts.append((rest, _device_stats([dense[i] for i in rest])))
        return in_order(len(dense), parts)  # type: ignore[no-any-return]
    dtype = accumulation_dtype(tensors[0].device)
    l2 = torch.stack(torch._foreach_norm(dense, 2, dtype=dtype)).to(dtype)
    linf = torch.stack(torch._foreach_norm(dense, math.inf)).to(dtype)
    try:  # one fused kernel; float64 counts are exact to 2^53 elements
        nonzero = torch.stack(torch._foreach_norm(dense, 0, dtype=dtype)).to(dtype)
    except (RuntimeError, TypeError):
        nonzero = torch.stack([torch.count_nonzero(t) for t in dense]).to(dtype)
    return torch.stack([l2, linf, nonzero], dim=1)
