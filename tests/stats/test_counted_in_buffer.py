"""`NormBatch.add_counted` counts small gradients from their copies in the pending buffer: the
same norms, max |g| and exact non-zero counts as a separate count, across buffer flushes,
with empty, NaN, -0.0 and mixed small / large gradients."""

from __future__ import annotations

import math

import pytest
import torch

from gradviz_widgets.stats.norms import NormBatch, _segment_nonzeros


def _grads(seed: int, n: int, large: bool) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for k in range(n):
        size = [0, 1, 16, 256, 4096][k % 5]
        g = torch.randn(size, generator=gen)
        g[g.abs() < 0.6] = 0.0
        if size > 2 and k % 7 == 0:
            g[1], g[2] = float("nan"), -0.0
        out.append(g.t() if g.dim() == 2 else g)
    out.append(torch.randn(16, 16, generator=gen).t())  # transposed
    out.append(torch.zeros(1, dtype=torch.float16))
    if large:
        big = torch.randn(10_000, generator=gen)
        big[::3] = 0.0
        out.insert(3, big)
    return out


def _expected(g: torch.Tensor) -> tuple[float, float, int]:
    x = g.double()
    return (
        x.square().sum().sqrt().item(),
        x.abs().max().item() if g.numel() else 0.0,
        int(torch.count_nonzero(g)),
    )


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-12, abs=0.0)


@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize("n", [2, 40, 400])  # 400: more than the pending buffer holds
def test_counts_from_the_buffer_match_a_separate_count(n: int, large: bool) -> None:
    grads = _grads(n, n, large)
    batch = NormBatch(torch.device("cpu"))
    batch.add([torch.randn(8, 8)], norms_only=True)  # a flow gradient already in the buffer
    slots, at = batch.add_counted(grads)
    values = batch.resolve()
    for k, g in enumerate(grads):
        norm, top, count = _expected(g)
        got_norm, got_top = batch.pair(values, slots[k])
        assert values[at + k] == count
        assert _same(got_norm, norm) and _same(got_top, top)


def test_segment_nonzeros_leaves_empty_segments_at_zero() -> None:
    flat = torch.tensor([0.0, 1.0, float("nan"), -0.0, 2.0])
    got = _segment_nonzeros(flat, [0, 2, 0, 3, 0])
    assert got.tolist() == [0, 1, 0, 2, 0] and got.dtype == torch.int64
    assert _segment_nonzeros(torch.zeros(0), [0, 0]).tolist() == [0, 0]
