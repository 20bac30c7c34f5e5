"""Numbers an outside tester found wrong or missing: float64 models over 1M elements, complex
parameters, bfloat16 update ratios, float64 gradients beyond 1e±154 (docs/watch.md, "Numbers")."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from gradviz_widgets.watch import GradWatch
from gradviz_widgets.watch.baselines import module_norms
from gradviz_widgets.watch.ratio import Snapshot
from gradviz_widgets.watch.reduce import SMALL, _device_stats, grad_stats, param_norms


def run(model: nn.Module, x: torch.Tensor, tmp_path, steps: int = 2, lr: float = 0.5):
    """`steps` SGD steps under a watch measuring every update ratio; the history, and per step
    the float64 hand computation of each parameter's (grad norm, update ratio)."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "stopped recording" must not happen
        watch = GradWatch(model, optimizer=opt, path=tmp_path, spikes=False, update_ratio=True)
        hand = []
        for _ in range(steps):
            opt.zero_grad()
            out = model(x)
            (out.abs() if out.is_complex() else out).float().pow(2).mean().backward()
            before = {n: p.detach().to(_wide(p)).clone() for n, p in model.named_parameters()}
            opt.step()
            hand.append({n: _hand(p, before[n]) for n, p in model.named_parameters()})
        watch.close()
    return watch.history(), hand


def _wide(p: torch.Tensor) -> torch.dtype:
    return torch.complex128 if p.is_complex() else torch.float64


def _hand(p: torch.Tensor, before: torch.Tensor) -> tuple[float, float]:
    grad = p.grad.detach().to(_wide(p))
    ratio = (p.detach().to(_wide(p)) - before).norm() / before.norm()
    return grad.norm().item(), ratio.item()


def check(history, hand: list[dict], rel: float) -> None:
    assert sorted(history.step.unique()) == list(range(len(hand)))
    for step, expected in enumerate(hand):
        rows = history[history.step == step].set_index("param")
        for name, (norm, ratio) in expected.items():
            assert rows.loc[name].norm == pytest.approx(norm, rel=rel, abs=0), (step, name)
            assert rows.loc[name].update_ratio == pytest.approx(ratio, rel=rel, abs=0), (step, name)


def test_a_float64_model_over_a_million_elements_records_its_update_ratios(tmp_path):
    """Defect 1: the update ratio's float32 block norm refused float64 (0 of 3 steps recorded)."""
    torch.manual_seed(0)
    model = nn.Linear(1024, 1024).double()
    history, hand = run(model, torch.randn(4, 1024, dtype=torch.float64), tmp_path, lr=1e-3)
    check(history, hand, rel=1e-6)  # float32 storage


class Spectral(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)
        self.w = nn.Parameter(torch.randn(9, dtype=dtype) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.irfft(torch.fft.rfft(self.lin(x.to(self.lin.weight.dtype))) * self.w, n=16)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_parameters_are_recorded_as_sqrt_of_summed_moduli_squared(tmp_path, dtype):
    """Defect 2: a complex parameter stopped the record at step 0 (vector_norm's dtype)."""
    torch.manual_seed(0)
    model = Spectral(dtype)
    if dtype == torch.complex128:
        model.lin.double()
    history, hand = run(model, torch.randn(4, 16), tmp_path, steps=3, lr=1e-2)
    check(history, hand, rel=1e-6)


def test_complex_gradient_norms_are_not_rounded_to_float32():
    """|z| of a complex64 taken in complex128: its norm and max to float64 rounding (|z| in
    complex64 is off by ~1e-8), the zero count per complex element."""
    torch.manual_seed(0)
    z = torch.randn(3000, dtype=torch.complex64)
    z[:10] = 0
    z[10:20] = torch.complex(torch.zeros(10), torch.ones(10))  # real part 0: not zero
    ref = z.to(torch.complex128).abs()
    stats = grad_stats([z, z[:5]])
    assert stats[0].tolist() == pytest.approx(
        [ref.norm().item(), ref.max().item(), 2990], rel=1e-13, abs=0
    )
    assert stats[1].tolist() == [0.0, 0.0, 0.0]
    assert param_norms([z]).tolist() == pytest.approx([ref.norm().item()], rel=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width", [256, 1100])  # 1100: over SMALL elements
def test_low_precision_update_ratios_are_exact_to_float32_rounding(tmp_path, dtype, width):
    """Defect 3: Δp formed in bfloat16 was rounded to 8 bits (1.3e-5 to 1.8e-3 off)."""
    torch.manual_seed(0)
    model = nn.Linear(width, width).to(dtype)
    assert (sum(p.numel() for p in model.parameters()) > SMALL) == (width > 1024)
    history, hand = run(model, torch.randn(8, width).to(dtype), tmp_path, steps=3)
    check(history, hand, rel=1e-6)


def test_snapshot_of_low_precision_parameters_keeps_their_dtype():
    """The saved copy stays in the parameters' dtype (memory); only Δp is formed wider."""
    w = torch.tensor([1.0, -3.0], dtype=torch.bfloat16)
    snap = Snapshot()
    snap.take([0], [w])
    w.copy_(torch.tensor([1.0078125, 0.001], dtype=torch.bfloat16))  # |Δ| needs > 8 bits
    dnorm, pnorm = snap.measure([w])
    exact = math.hypot(0.0078125, float(torch.tensor(0.001, dtype=torch.bfloat16)) + 3.0)
    assert dnorm.tolist() == pytest.approx([exact], rel=1e-12, abs=0)
    assert pnorm.tolist() == pytest.approx([math.sqrt(10.0)], rel=1e-7)


@pytest.mark.parametrize("scale", [1e200, 1e-300, 1e-160])
def test_float64_gradients_of_any_magnitude_read_their_norm(tmp_path, scale):
    """Defect 4: a finite 1e200 gradient read norm=inf (status nonfinite), 1e-300 read 0.0."""
    model = nn.Linear(3, 1, bias=False).double()
    opt = torch.optim.SGD(model.parameters(), 0.0)
    watch = GradWatch(model, optimizer=opt, path=tmp_path, spikes=False)
    (model(torch.ones(1, 3, dtype=torch.float64)).sum() * scale).backward()
    exact = model.weight.grad.abs().max().item() * math.sqrt(3)  # three equal entries
    opt.step()
    watch.close()
    row = watch.history().iloc[0]
    assert row.norm == pytest.approx(exact, rel=1e-12, abs=0)
    assert row.status == ("exploding" if scale > 1 else "vanishing")
    assert all(a.kind != "nonfinite" for a in watch.anomalies)


@pytest.mark.parametrize("scale", [1e200, 1e-300, 1e-160, 1.0])
def test_float64_norms_scale_on_every_path(scale):
    """The numpy path (small), the chunked one (over SMALL elements), and parameter norms."""
    torch.manual_seed(0)
    big = torch.randn(SMALL + 5, dtype=torch.float64)
    small = torch.randn(100, dtype=torch.float64)
    for t in (small, big):
        x = t * scale
        ref = math.sqrt(float((t * t).sum())) * scale
        for stats in (grad_stats([x, torch.ones(2)]), grad_stats([x, torch.ones(2).bfloat16()])):
            assert stats[0, 0] == pytest.approx(ref, rel=1e-12, abs=0), (len(t), scale)
            assert stats[0, 1] == x.abs().max().item() and stats[0, 2] == len(t)
            assert stats[1].tolist() == pytest.approx([math.sqrt(2), 1, 2])
        wide, narrow = param_norms([x, torch.ones(2)]).tolist()
        assert wide == pytest.approx(ref, rel=1e-12, abs=0)
        assert narrow == pytest.approx(math.sqrt(2), rel=1e-7)  # float32 blocks
    inf_nan = grad_stats([torch.tensor([1e300, math.inf], dtype=torch.float64)])
    assert inf_nan[0].tolist() == [math.inf, math.inf, 2.0]


def test_module_norms_neither_overflow_nor_underflow():
    """Spike baselines combine parameter norms into module norms: 1e200 and 1e-300 stay finite
    and non-zero, each module scaled on its own."""
    norms = np.array([3e200, 4e200, 3e-300, 4e-300, np.nan, 2.0])
    got = module_norms(norms, np.array([0, 0, 1, 1, 2, 3]), 4)
    assert got[:2] == pytest.approx([5e200, 5e-300], rel=1e-15, abs=0)
    assert np.isnan(got[2]) and got[3] == 2.0


def test_accelerator_path_routes_float64_and_complex_to_scaled_reductions():
    """`_device_stats` (accelerators) merges the fused float32/bf16 rows with the scaled float64
    and complex ones in order, as a tensor (run here on CPU tensors: the same kernels)."""
    torch.manual_seed(0)
    ts = [
        torch.randn(5),
        torch.randn(4, dtype=torch.float64) * 1e200,
        torch.randn(3, dtype=torch.complex64),
        torch.zeros(0, dtype=torch.float64),
        torch.randn(6).bfloat16(),
    ]
    got = _device_stats(ts)
    assert isinstance(got, torch.Tensor) and got.shape == (5, 3)
    assert np.allclose(got.numpy(), grad_stats(ts), rtol=1e-12, atol=0)
    assert got[1, 0].item() == pytest.approx(ts[1].div(1e200).norm().item() * 1e200, rel=1e-12)
