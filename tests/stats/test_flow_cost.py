"""What measuring the gradient flow costs on deep graphs of small tensors, counted (never timed):
small CPU gradients are copied into one float64 buffer and reduced together, so the per-tensor
reduction (`norms_and_maxes`) and the batched one (`segmented`) run a bounded number of times
however deep the graph; the module tracker does not flatten plain tensor arguments; the numbers
stay exact and come back in one host sync."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import gradviz_widgets.stats.norms as stats
import gradviz_widgets.trace.attribution as attribution
from gradviz_widgets import GradExplorer
from gradviz_widgets.stats.norms import NormBatch

LAYERS = 60


def chain(layers: int = LAYERS) -> nn.Sequential:
    torch.manual_seed(0)
    mods: list[nn.Module] = []
    for _ in range(layers):
        mods += [nn.Linear(16, 16), nn.Tanh()]
    return nn.Sequential(*mods)


def counting(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[int]:
    calls = [0]
    real = getattr(module, name)

    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def reference_flow(model: nn.Module, x: torch.Tensor) -> dict[str, float]:
    """float64 norms of the gradient w.r.t. each Linear's output, from a plain backward."""
    twin = copy.deepcopy(model)
    outs: dict[str, torch.Tensor] = {}
    for name, m in twin.named_children():
        if isinstance(m, nn.Linear):
            m.register_forward_hook(lambda mod, a, out, name=name: outs.setdefault(name, out))
    loss = twin(x).sum()
    grads = torch.autograd.grad(loss, list(outs.values()))
    return {n: g.double().norm().item() for n, g in zip(outs, grads)}


def test_deep_chain_flow_batched_exact_one_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    model, x = chain(), torch.randn(8, 16)
    per_tensor = counting(monkeypatch, stats, "norms_and_maxes")
    batched = counting(monkeypatch, stats, "segmented")
    ex = GradExplorer(model, x, loss_fn=lambda out, *_: out.sum())
    report = ex.run()
    assert report.host_syncs == 1
    # ~3 gradients per op node, hundreds of nodes: a bounded number of reductions
    assert per_tensor[0] <= 2 and 1 <= batched[0] <= 2
    ref = reference_flow(model, x)
    flows = {
        e.src.split("/")[0]: e.grad_norm
        for e in ex.graph.edges
        if e.src.endswith("/AddmmBackward0#0")
    }
    assert set(flows) == set(ref)
    for name, norm in ref.items():
        assert flows[name] == pytest.approx(norm, rel=1e-12), name


def test_pending_buffer_flushes_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    """A small buffer (40 elements) fills many times; every pair still lands in its slot."""
    monkeypatch.setattr(stats, "chunk_size", lambda device: 40)
    torch.manual_seed(0)
    grads = [
        torch.randn(5, 3),
        torch.randn(3, 5).t(),
        torch.ones(1).expand(4, 7),
        torch.zeros(0),
        torch.tensor([float("nan"), 1.0]),
        torch.randn(10, dtype=torch.float64),
        torch.randn(7).half(),
        torch.randn(39),
        torch.randn(2, 3).bfloat16(),
        torch.tensor([float("inf"), 0.0]),
    ]
    batch = NormBatch(torch.device("cpu"))
    slots = batch.add(grads) + batch.add(grads[:3])
    scalar = batch.add_scalar(torch.tensor(7.0))
    slots += batch.add(grads[::-1])
    values = batch.resolve()
    assert batch.syncs == 1 and values[scalar] == 7.0
    for g, slot in zip(grads + grads[:3] + grads[::-1], slots):
        ref = (g.double().norm().item(), g.double().abs().max().item() if g.numel() else 0.0)
        assert batch.pair(values, slot) == pytest.approx(ref, rel=1e-12, nan_ok=True)


def test_tracker_does_not_flatten_plain_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    flattened = counting(monkeypatch, attribution, "tree_flatten")
    model = chain(20)
    tracker = attribution.ScopeTracker(model)
    with tracker.tracking():
        y = model(torch.randn(2, 16))
    assert flattened[0] == 0
    assert tracker.owner[y.grad_fn] == (("39", 0),)  # the last Tanh


def test_nonzero_counts_small_and_large_together() -> None:
    torch.manual_seed(0)
    grads = [
        torch.tensor([0.0, 1.0, 2.0]),
        torch.zeros(0),
        torch.ones(1).expand(3, 4),
        torch.randn(10_000).relu(),
        torch.tensor([[0.0, 1.0], [2.0, 0.0]]).t(),
        torch.zeros(5, dtype=torch.float64),
    ]
    for chosen in (grads, grads[:3], grads[3:4], [grads[0], grads[3]]):
        batch = NormBatch(torch.device("cpu"))
        slot = batch.add_nonzero_counts(chosen)
        values = batch.resolve()
        assert values[slot : slot + len(chosen)] == [float(torch.count_nonzero(g)) for g in chosen]
