"""Gradient norms, counts and hook statistics are exact at every size and magnitude.

Every number is compared with a float64 reference computed independently
(`torch.linalg.vector_norm(g.double())`, or a closed form for the big constant tensors) at
1e-9 relative. Float32 accumulation (the old path) misses these: its norms drift by ~1e-7 at any
size and by 1e-3 at 25M elements, its sums and counts stop growing past 2^24-2^25 elements and its
squares overflow once a norm passes ~1.8e19. Each run still resolves in one host sync.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from gradviz_widgets import GradExplorer
from gradviz_widgets.stats.norms import NormBatch
from gradviz_widgets.stats.tensor import HIST_BINS, queue_stats, read_stats
from gradviz_widgets.vocabulary import Thresholds, classify

REL = 1e-9
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class CountOps(TorchDispatchMode):
    """The aten ops run inside it, by name: cost measured without a clock."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.ops.append(func.__name__)
        return func(*args, **(kwargs or {}))


def ref_norm(g: torch.Tensor) -> float:
    """float64 L2 norm, divided by the largest |g| first so float64 squares cannot overflow."""
    d = g.abs().double()
    top = d.max()
    if top == 0 or not torch.isfinite(top):
        return torch.linalg.vector_norm(d).item()
    return (torch.linalg.vector_norm(d / top) * top).item()


def measured(grads: list[torch.Tensor], device: str) -> tuple[list[tuple[float, float]], NormBatch]:
    batch = NormBatch(torch.device(device))
    slots = batch.add(grads)
    values = batch.resolve()
    return [NormBatch.pair(values, s) for s in slots], batch


@pytest.mark.parametrize("device", DEVICES)
def test_norms_exact_at_every_size(device: str) -> None:
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(n, generator=gen).to(device) for n in (1, 1023, 1025, 25_000_000)]
    grads.append(grads[1])  # the same live tensor again: measured once, read twice
    pairs, batch = measured(grads, device)
    assert batch.syncs == 1
    for g, (norm, top) in zip(grads, pairs):
        assert norm == pytest.approx(ref_norm(g), rel=REL), g.numel()
        assert top == g.abs().max().item()
    assert pairs[-1] == pairs[1]


@pytest.mark.parametrize("device", DEVICES)
def test_dense_110m_float32(device: str) -> None:
    n, value = 110_000_000, torch.tensor(0.1)  # float32 0.1, whose square is not a float32
    g = torch.full((n,), value.item(), device=device)
    batch = NormBatch(torch.device(device))
    slot = batch.add([g])[0]
    count = batch.add_nonzero_counts([g])
    values = batch.resolve()
    exact = float(value) * math.sqrt(n)  # float64 closed form of the float32 tensor's norm
    assert values[slot] == pytest.approx(exact, rel=REL)
    assert values[slot + 1] == float(value) and values[count] == n


@pytest.mark.parametrize("device", DEVICES)
def test_norms_exact_at_every_magnitude(device: str) -> None:
    gen = torch.Generator().manual_seed(1)
    base = torch.rand(1025, generator=gen) + 0.5
    grads = [base * m for m in (1e-30, 1e-20, 1e-3, 1e10, 1e20, 1e30)]
    grads.append(torch.full((1000,), 3e38))  # finite float32, norm ~9.5e39 > float32 max
    grads.append((torch.rand(10_000, generator=gen) + 0.5) * 6e17)  # all < 1e18, norm > 1.8e19
    nonfinite = [
        torch.tensor([1.0, math.nan, 2.0]),
        torch.tensor([1.0, math.inf]),
        torch.tensor([-math.inf, 1e-30]),
    ]
    pairs, batch = measured([g.to(device) for g in grads + nonfinite], device)
    assert batch.syncs == 1
    for g, (norm, top) in zip(grads, pairs):
        assert norm == pytest.approx(ref_norm(g), rel=REL), g.abs().max()
        assert math.isfinite(norm) and top == g.abs().max().item()
    big = pairs[len(grads) - 2]
    assert big[0] > torch.finfo(torch.float32).max
    assert classify(*big, Thresholds()) == "exploding"
    assert classify(*pairs[len(grads) - 1], Thresholds()) == "exploding"
    for norm, top in pairs[len(grads) :]:
        assert classify(norm, top, Thresholds()) == "nonfinite"
    assert math.isnan(pairs[len(grads)][0]) and math.isinf(pairs[-1][0])


@pytest.mark.parametrize("device", DEVICES)
def test_norms_exact_for_float16_bfloat16_float64(device: str) -> None:
    gen = torch.Generator().manual_seed(2)
    r = torch.randn(300_001, generator=gen)
    grads = [
        r.half(),
        r.bfloat16(),
        r.double() * 1e200,
        r.double() * 1e-200,
        torch.tensor([1e308, -1.2e308, 1e-320], dtype=torch.float64),
        torch.tensor([5e-324], dtype=torch.float64),
        torch.tensor([60000.0] * 5000).half(),
        torch.complex(r, -r),
    ]
    pairs, _ = measured([g.to(device) for g in grads], device)
    for g, (norm, top) in zip(grads, pairs):
        # |z| of a complex64 in float32 is off by ~1e-7 an element: the norm is |z| in float64
        mag = g.to(torch.complex128).abs() if g.is_complex() else g.abs()
        assert norm == pytest.approx(ref_norm(mag), rel=1e-13 if g.is_complex() else REL), g.dtype
        assert top == pytest.approx(mag.max().item(), rel=1e-15)
    assert pairs[5] == (5e-324, 5e-324) and pairs[4][0] == pytest.approx(math.hypot(1e308, 1.2e308))


@pytest.mark.parametrize("device", DEVICES)
def test_zero_counts_exact_past_2_to_25(device: str) -> None:
    n, zeros = 40_000_000, torch.arange(7, 40_000_000, 3_333)  # 12,002 exact zeros
    g = torch.ones(n)
    g[zeros] = 0.0
    grads = [
        g.to(device),
        g.to(device, torch.bfloat16),
        torch.ones(1, device=device).expand(n),
    ]  # stride 0: one value n times
    batch = NormBatch(torch.device(device))
    at = batch.add_nonzero_counts(grads)
    slots = batch.add(grads)
    values = batch.resolve()
    assert values[at : at + 3] == [n - len(zeros), n - len(zeros), n]
    assert values[slots[0]] == pytest.approx(math.sqrt(n - len(zeros)), rel=REL)
    assert values[slots[2]] == pytest.approx(math.sqrt(n), rel=REL)


@pytest.mark.parametrize("device", DEVICES)
def test_hook_statistics_exact(device: str) -> None:
    x = torch.full((20_000_000,), 0.1)
    x[:2_000_000] = 1.3  # 18M values in one bin: past float32 counting (2^24)
    nan = x[:3_000_000].clone()
    nan[::75_001] = math.nan
    nan[5::150_001] = -math.inf
    gen = torch.Generator().manual_seed(3)
    small = torch.randn(1025, generator=gen) + 2.0
    wide = (torch.rand(100_000, generator=gen) + 0.5) * 6e17  # all < 1e18, norm > 1.8e19
    tensors = [x, nan, small, wide, small.double() * 1e200, small.double() * 1e-200]
    batch = NormBatch(torch.device(device))
    pending = [queue_stats(t.to(device), batch) for t in tensors]
    values = batch.resolve()
    assert batch.syncs == 1
    s = [read_stats(p, values) for p in pending]
    assert s[0].histogram == (18_000_000,) + (0,) * (HIST_BINS - 2) + (2_000_000,)
    assert s[0].norm == pytest.approx(ref_norm(x), rel=REL)
    assert s[0].mean == pytest.approx(x.double().mean().item(), rel=REL)
    finite = nan[torch.isfinite(nan)]
    assert (s[1].nan, s[1].inf) == (39, 20) and sum(s[1].histogram) == finite.numel()
    assert s[1].mean == pytest.approx(finite.double().mean().item(), rel=REL)
    assert (s[1].min, s[1].max) == (finite.min().item(), finite.max().item())
    for t, st in zip(tensors[2:], s[2:]):
        assert st.norm == pytest.approx(ref_norm(t), rel=REL), t.abs().max()
        assert st.mean == pytest.approx(t.double().mean().item(), rel=REL)
        assert (st.min, st.max) == (t.min().item(), t.max().item())
        assert sum(st.histogram) == t.numel() and st.nan == st.inf == 0


def test_public_api_huge_gradients() -> None:
    torch.manual_seed(4)
    model = nn.Linear(256, 256)
    x = torch.randn(8, 256)
    probe = copy.deepcopy(model)
    probe(x).square().sum().backward()
    # weight gradient elements up to 6e17 (each square fits float32), its norm ~1e20 does not
    scale = 6e17 / probe.weight.grad.abs().max().item()

    def loss_fn(out: torch.Tensor) -> torch.Tensor:
        return out.square().sum() * scale

    report = GradExplorer(model, x, loss_fn=loss_fn).run()
    ref = copy.deepcopy(model)
    loss_fn(ref(x)).backward()
    for name, p in ref.named_parameters():
        assert report.param_norms[name] == pytest.approx(ref_norm(p.grad), rel=REL), name
    assert report.param_norms["weight"] > 1.8e19
    assert report.host_syncs == 1
    assert {p.status for p in report.params} == {"exploding"}


def test_public_api_zero_fraction_exact_past_2_to_25() -> None:
    model = nn.Linear(6400, 6400, bias=False)  # 40,960,000 weights
    x = torch.ones(1, 6400)
    x[0, ::64] = 0.0  # 100 dead input features: 100 zero columns of the weight gradient
    report = GradExplorer(model, x).run()
    (p,) = report.params
    assert p.zero_fraction == 100 / 6400
    assert p.norm == pytest.approx(math.sqrt(6300 * 6400), rel=REL)
    assert report.host_syncs == 1


def test_deferred_tensors_interleave_with_small_ones_across_flushes() -> None:
    """Medium CPU tensors (above SMALL) are reduced to 0-d parts at `add` and finished with
    the pending buffer: mixed in one call, across the buffer's flushes and around vectors,
    each slot holds its own tensor's exact pair (float16, bfloat16, expanded and transposed
    tensors included)."""
    gen = torch.Generator().manual_seed(3)
    batch = NormBatch(torch.device("cpu"))
    expected: list[tuple[int, torch.Tensor]] = []
    for k in range(40):  # 40 x ~3 small tensors of 3,000 elements overflow the 2^18 buffer
        small = torch.randn(3000, generator=gen) * 10.0**k
        medium = torch.randn(70, 90, generator=gen) * 10.0 ** (-k)
        kinds = [medium.t(), medium.to(torch.float16), medium.to(torch.bfloat16)]
        big = torch.randn(1, 9000, generator=gen).expand(3, 9000)  # stride 0: 3 repeats
        grads = [small, kinds[k % 3], small * 2, big, small * 3]
        expected += list(zip(batch.add(grads), grads))
        if k % 7 == 0:
            batch.add_scalar(torch.tensor(float(k)))  # a vector closes the open run
    values = batch.resolve()
    assert batch.syncs == 1
    for slot, g in expected:
        norm, top = NormBatch.pair(values, slot)
        assert norm == pytest.approx(ref_norm(g), rel=REL)
        assert top == g.abs().max().double().item()


def test_a_transposed_gradient_is_measured_once() -> None:
    """A Linear weight's gradient reaches its leaf as the transpose of what the matmul sent:
    both views address the same elements, so they share one measurement (a slice does not)."""
    g = torch.randn(300, 200)
    batch = NormBatch(torch.device("cpu"))
    first, again, part = batch.add([g]), batch.add([g.t()]), batch.add([g[1:]])
    assert again == first and part != first
    values = batch.resolve()
    assert NormBatch.pair(values, part[0])[0] == pytest.approx(ref_norm(g[1:]), rel=REL)


def test_a_medium_gradient_costs_a_few_kernels() -> None:
    """Cost without timing: the exact pair of a CPU gradient above SMALL takes a float64 copy,
    a dot product and a min/max at `add` (the old path ran ~30 small ops per tensor), and the
    pairs of all of them are finished together by a handful of kernels at `resolve`."""
    grads = [torch.randn(20_000) for _ in range(50)]
    batch = NormBatch(torch.device("cpu"))
    batch.add(grads[:1])  # the scratch buffer is allocated once
    with CountOps() as count:
        for g in grads[1:]:
            batch.add([g])
        at_add = len(count.ops)
        values = batch.resolve()
    assert at_add <= 5 * 49, at_add
    assert len(count.ops) - at_add <= 20, len(count.ops) - at_add
    assert NormBatch.pair(values, 2 * 49)[0] == pytest.approx(ref_norm(grads[-1]), rel=REL)


def test_finite_cpu_hook_stats_equal_the_general_path() -> None:
    """The fast path of hook statistics (finite float32/16/bf16 on the CPU) gives the general
    path's numbers and bins exactly, ties on bin edges and constant tensors included, in
    fewer than half its kernels per chunk."""
    from gradviz_widgets.stats.reduce import Scratch
    from gradviz_widgets.stats.tensor import general_stats, stats_vector

    gen = torch.Generator().manual_seed(5)
    for trial in range(60):
        n = 300_000 if trial == 0 else int(torch.randint(1, 4000, (1,), generator=gen))
        scale = 10.0 ** float(torch.randint(-30, 30, (1,), generator=gen))
        x = torch.randn(n, generator=gen) * scale
        x = torch.round(x * 4 / scale) * scale / 4 if trial % 4 == 0 else x  # ties
        x = torch.full((n,), 2.5) if trial % 9 == 0 else x
        x = x.to((torch.float32, torch.float16, torch.bfloat16)[trial % 3])
        fast = stats_vector(x, torch.float64, Scratch())
        assert torch.equal(fast, general_stats(x, torch.float64, Scratch())), trial

    x, counts = torch.randn(8 * 2**18), []
    for fn in (stats_vector, general_stats):
        with CountOps() as count:
            fn(x, torch.float64, Scratch())
        counts.append(len(count.ops))
    assert counts[0] * 2 < counts[1], counts


def test_flow_and_hook_statistics_of_one_tensor_share_one_reduction() -> None:
    """A hooked gradient is measured by the flow and by the hook's statistics: one min/max
    and one sum of squares for both, in either order, with the same numbers as measured apart;
    a copy (a |complex| tensor) never borrows the parts of its source."""
    from gradviz_widgets.stats.reduce import Scratch
    from gradviz_widgets.stats.tensor import stats_vector

    g, h = torch.randn(300, 70), torch.randn(5000)
    batch = NormBatch(torch.device("cpu"))
    with CountOps() as count:
        slot = batch.add([g])[0]
        first = queue_stats(g, batch)  # flow first, then the hook
        second = queue_stats(h, batch)
        again = batch.add([h])[0]  # the hook first, then the flow
    assert count.ops.count("aminmax.default") == 2 and count.ops.count("dot.default") == 2
    values = batch.resolve()
    for t, stats, at in ((g, first, slot), (h, second, again)):
        alone = stats_vector(t.reshape(-1), torch.float64, Scratch()).tolist()
        got = read_stats(stats, values)
        assert got.norm == pytest.approx(alone[0], rel=1e-15)
        assert values[at] == pytest.approx(alone[0], rel=1e-15)
        assert (got.min, got.max, got.histogram) == (alone[1], alone[2], tuple(map(int, alone[8:])))
        assert values[at + 1] == t.abs().max().item()
    z = torch.randn(5000, dtype=torch.complex64)
    batch = NormBatch(torch.device("cpu"))
    queue_stats(z, batch)
    assert read_stats(queue_stats(z, batch), batch.resolve()).norm == pytest.approx(
        ref_norm(z.to(torch.complex128).abs()), rel=1e-13
    )


def test_norms_only_skip_the_max_pass_and_never_lend_a_missing_max() -> None:
    """What flows along edges is measured by its norm only: a large CPU gradient takes a float64
    copy and a dot product, no min/max; the norm is the same number as the full pair's. A
    later request for the full pair of the same tensor (a parameter's gradient, a hook's
    statistics) reads its max then and shares the sum of squares; the reverse order reuses."""
    from gradviz_widgets.stats.reduce import Scratch
    from gradviz_widgets.stats.tensor import stats_vector

    g, h, k = torch.randn(300, 70), torch.randn(900_000), torch.randn(6000)
    g[0, 0] = -50.0
    batch = NormBatch(torch.device("cpu"))
    with CountOps() as count:
        flow = batch.add([g, h], norms_only=True)
    assert "aminmax.default" not in count.ops and count.ops.count("dot.default") == 1 + 4
    with CountOps() as count:
        full = batch.add([g.t()])  # the same elements: a new slot with its max, sum shared
        stats = queue_stats(h, batch)  # the hook after the flow: the range only
    assert full != flow[:1] and "dot.default" not in count.ops
    assert count.ops.count("aminmax.default") == 2  # g and h
    full_first = batch.add([k])
    with CountOps() as count:
        assert batch.add([k], norms_only=True) == full_first
    assert count.ops == []
    values = batch.resolve()
    for t, slot in ((g, flow[0]), (h, flow[1]), (g, full[0]), (k, full_first[0])):
        assert values[slot] == pytest.approx(ref_norm(t), rel=REL)
    assert math.isnan(values[flow[0] + 1]) and math.isnan(values[flow[1] + 1])
    assert values[full[0] + 1] == 50.0 and values[full_first[0] + 1] == k.abs().max().item()
    alone = stats_vector(h, torch.float64, Scratch()).tolist()
    got = read_stats(stats, values)
    assert (got.norm, got.min, got.max) == pytest.approx(alone[:3], rel=1e-15)


def test_what_flowed_along_edges_has_its_norm_and_a_max_only_when_zero() -> None:
    """The explorer's edges and op nodes carry exact norms; their max |g| is not measured
    (None), except 0.0 where exactly nothing flowed, so "zero" and the zero origins read as
    before; leaves keep their max |g|."""
    from gradviz_widgets.examples import dead_branch_example

    net, x, y = dead_branch_example()
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    ex.run()
    graph = ex.graph
    zero = [e for e in graph.edges if e.status == "zero"]
    assert zero and all(e.grad_norm == 0.0 and e.grad_max == 0.0 for e in zero)
    flowing = [e for e in graph.edges if e.grad_norm]
    assert flowing and all(e.grad_max is None for e in flowing)
    ops = [n for n in graph.nodes if n.kind == "op" and n.grad_norm]
    assert ops and all(n.grad_max is None for n in ops)
    params = [n for n in graph.nodes if n.kind == "param" and n.grad_norm]
    assert params and all(n.grad_max is not None and n.grad_max > 0 for n in params)
    assert ex.report.param_status["gate.weight"] == "zero"
    for name in ("gate.weight", "gate.bias"):
        assert graph.node(ex.report.zero_origins[name]).op == "ReluBackward0"


def test_the_fused_accelerator_path_skips_max_for_norms_only() -> None:
    """CUDA's fused reduction (run here on CPU tensors, which `_foreach_norm` also takes): one
    kernel kind without maxes, NaN where the max would be, the same norms."""
    from gradviz_widgets.stats.reduce import _fused

    xs = [(torch.randn(5000), 1), (torch.randn(3, 40).to(torch.bfloat16), 1), (torch.ones(1), 4)]
    with CountOps() as count:
        _, both = _fused([0, 1, 2], xs, torch.float64, True)
    with_maxes = len(count.ops)
    with CountOps() as count:
        _, norms = _fused([0, 1, 2], xs, torch.float64, False)
    assert count.ops.count("_foreach_norm.Scalar") == 1 and len(count.ops) < with_maxes
    assert torch.equal(norms[0::2], both[0::2]) and bool(norms[1::2].isnan().all())
    assert both[1::2].tolist() == [x.abs().max().item() for x, _ in xs]


def test_parameter_gradients_are_counted_in_the_pass_that_measures_them() -> None:
    """`add_counted` (the run's read-back of parameter gradients) gives the pairs of `add` and
    the counts of `count_nonzero` exactly, NaN, expanded, float16/bf16 and multi-chunk
    gradients included, without a `count_nonzero` pass over the large CPU ones."""
    gen = torch.Generator().manual_seed(3)
    grads = [
        torch.randn(700_000, generator=gen).relu(),  # ~half exact zeros, three chunks
        torch.zeros(300, 70),
        torch.randn(5000, generator=gen).to(torch.bfloat16),
        torch.randn(64, 64, generator=gen).half().t(),
        torch.tensor([1.0, 0.0, float("nan")]).repeat(3000),
        torch.full((1,), 2.0).expand(9000),
        torch.randn(30, generator=gen),  # small ones are counted together, as before
        torch.zeros(40),
    ]
    grads[0][5] = float("nan")
    batch = NormBatch(torch.device("cpu"))
    with CountOps() as count:
        slots, at = batch.add_counted(grads)
    assert count.ops.count("count_nonzero.default") == 0
    values = batch.resolve()
    apart = NormBatch(torch.device("cpu"))
    ref_slots = apart.add(grads)
    ref_at = apart.add_nonzero_counts(grads)
    ref = apart.resolve()
    for k, g in enumerate(grads):
        pair, want = NormBatch.pair(values, slots[k]), NormBatch.pair(ref, ref_slots[k])
        assert pair == pytest.approx(want, rel=1e-15, nan_ok=True), k
        assert values[at + k] == ref[ref_at + k] == torch.count_nonzero(g).item(), k
