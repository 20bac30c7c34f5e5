"""Gradient modifiers: scale / clip_value / clip_norm change exactly what they should, only in
explorer runs, and the report flags exactly the parameters they changed."""

from __future__ import annotations

import copy

import pytest
import torch
from small_models import CE, data, mlp
from torch import nn

from gradviz_widgets import GradExplorer, GradExplorerError
from gradviz_widgets.examples import resnet18
from gradviz_widgets.hooks.modifiers import Modifier


def grads_with(model: nn.Module, x, y, path: str | None = None, change=None) -> dict:
    """Parameter gradients of a plain step on a deepcopy, with `change` applied to the
    grad_input of the module at `path` by a plain full backward hook."""
    net = copy.deepcopy(model)
    if path is not None:
        dict(net.named_modules())[path].register_full_backward_hook(
            lambda m, gi, go: tuple(None if g is None else change(g) for g in gi)
        )
    CE(net(x), y).backward()
    return {n: p.grad for n, p in net.named_parameters()}


def norms(grads: dict) -> dict:
    return {n: g.double().norm().item() for n, g in grads.items()}


def test_scale_halves_upstream_gradients_exactly() -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    plain = ex.run()
    ex.set_modifier("fc2", scale=0.5)
    assert ex.modifiers == {"fc2": "scale by 0.5"}
    report = ex.run()
    upstream = {"fc1.weight", "fc1.bias"}  # fc2's grad_input flows to fc1 only
    for p in report.params:
        if p.name in upstream:
            assert p.norm == 0.5 * plain.param_norms[p.name]  # a power of two: exact
            assert p.modified_by == "scale by 0.5 at fc2"
            assert p.norm_before == plain.param_norms[p.name]
        else:
            assert p.norm == plain.param_norms[p.name]
            assert p.modified_by is None and p.norm_before is None
    assert any("2 parameter gradients changed by modifiers" in f for f in report.findings)
    expected = norms(grads_with(model, x, y, "fc2", lambda g: g * 0.5))
    assert report.param_norms == pytest.approx(expected, rel=1e-6)
    (event,) = ex.events  # the modifier's hook reports what it did
    assert event.modifier == "scale by 0.5" and event.kind == "backward"
    before, after = event.tensors["grad_input"][0], event.tensors["grad_input_modified"][0]
    assert after.norm == pytest.approx(0.5 * before.norm, rel=1e-12)
    assert after.max == pytest.approx(0.5 * before.max, rel=1e-12)


def test_clip_value_clamps() -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
    ex.set_hook("fc2")
    ex.run()
    (free,) = ex.events
    g_in = free.raw["grad_input"][0]
    limit = 0.5 * g_in.abs().max().item()
    assert (g_in.abs() > limit).any()
    ex.set_modifier("fc2", clip_value=limit)
    report = ex.run()
    (event,) = ex.events
    assert event.modifier == f"clip by value {limit:g}"
    torch.testing.assert_close(event.raw["grad_input"][0], g_in)
    clipped = event.raw["grad_input_modified"][0]
    torch.testing.assert_close(clipped, g_in.clamp(-limit, limit))
    stats = event.tensors["grad_input_modified"][0]
    assert -limit <= stats.min and stats.max <= limit
    assert max(abs(stats.min), abs(stats.max)) == pytest.approx(limit)
    expected = norms(grads_with(model, x, y, "fc2", lambda g: g.clamp(-limit, limit)))
    assert report.param_norms == pytest.approx(expected, rel=1e-6)
    assert {p.name for p in report.params if p.modified_by} == {"fc1.weight", "fc1.bias"}


class Mix(nn.Module):
    def forward(self, a, b):
        return a * b + a


class MixNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fa, self.fb, self.mix, self.head = (
            nn.Linear(4, 5),
            nn.Linear(4, 5),
            Mix(),
            nn.Linear(5, 3),
        )

    def forward(self, x):
        return self.head(self.mix(self.fa(x), self.fb(x)))


def test_clip_norm_clips_the_grad_input_tuple_like_clip_grad_norm() -> None:
    torch.manual_seed(0)
    model, (x, y) = MixNet(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
    plain = ex.run()
    ex.set_modifier("mix", clip_norm=0.05)
    report = ex.run()
    (event,) = ex.events
    g_a, g_b = event.raw["grad_input"]
    total = torch.cat([g_a.flatten(), g_b.flatten()]).norm().item()
    assert total > 0.05  # so it clips
    # torch's own clip_grad_norm_ on stand-in parameters holding the same gradients
    stand_ins = [
        torch.zeros_like(g_a, requires_grad=True),
        torch.zeros_like(g_b, requires_grad=True),
    ]
    for p, g in zip(stand_ins, (g_a, g_b)):
        p.grad = g.clone()
    returned = torch.nn.utils.clip_grad_norm_(stand_ins, max_norm=0.05)
    assert returned.item() == pytest.approx(total, rel=1e-6)
    for p, clipped in zip(stand_ins, event.raw["grad_input_modified"]):
        torch.testing.assert_close(clipped, p.grad)
    after = [s.norm for s in event.tensors["grad_input_modified"]]
    assert sum(n * n for n in after) ** 0.5 == pytest.approx(0.05, rel=1e-4)
    # one factor for both inputs: their ratio is kept
    assert after[0] / after[1] == pytest.approx(g_a.norm().item() / g_b.norm().item(), rel=1e-5)
    assert {p.name for p in report.params if p.modified_by} == {
        "fa.weight",
        "fa.bias",
        "fb.weight",
        "fb.bias",
    }
    for name in ("head.weight", "head.bias"):
        assert report.param_norms[name] == plain.param_norms[name]

    # a max_norm above the norm changes nothing, and nothing is flagged
    ex.set_modifier("mix", clip_norm=100.0)
    report = ex.run()
    assert report.param_norms == plain.param_norms
    assert not any(p.modified_by for p in report.params)


def test_modifier_on_a_graph_node() -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
    plain = ex.run()
    ex.set_modifier("act1/TanhBackward0#0", scale=2.0)
    assert ex.modifiers == {"act1/TanhBackward0#0": "scale by 2"}
    report = ex.run()
    (event,) = ex.events
    assert event.kind == "tensor" and event.modifier == "scale by 2"
    torch.testing.assert_close(
        event.raw["grad_output_modified"][0], 2 * event.raw["grad_output"][0]
    )
    flagged = {p.name: p for p in report.params if p.modified_by}
    assert set(flagged) == {"fc1.weight", "fc1.bias"}
    for name, p in flagged.items():
        assert p.norm == 2 * plain.param_norms[name] and p.norm_before == plain.param_norms[name]
        assert p.modified_by == "scale by 2 at act1/TanhBackward0#0"


def test_modifiers_change_only_explorer_runs() -> None:
    model, (x, y) = mlp(), data()
    original = grads_with(model, x, y)
    hooks_before = {
        (path, name): dict(getattr(m, name))
        for path, m in model.named_modules()
        for name in (
            "_forward_hooks",
            "_forward_pre_hooks",
            "_backward_hooks",
            "_backward_pre_hooks",
        )
    }
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    ex.set_modifier("fc2", scale=0.0)
    ex.set_modifier("act2/ReluBackward0#0", clip_norm=1e-3)
    report = ex.run()
    assert report.param_norms["fc1.weight"] == 0.0
    assert all(p.grad is None for p in model.parameters())
    # a plain step afterwards gives the original gradients
    model.zero_grad(set_to_none=True)
    CE(model(x), y).backward()
    for name, p in model.named_parameters():
        assert torch.equal(p.grad, original[name]), name
    assert {
        (path, name): dict(getattr(m, name))
        for path, m in model.named_modules()
        for name in (
            "_forward_hooks",
            "_forward_pre_hooks",
            "_backward_hooks",
            "_backward_pre_hooks",
        )
    } == hooks_before
    # removing the modifiers gives unmodified reports again
    ex.set_modifier("fc2")
    ex.set_modifier("act2/ReluBackward0#0")
    assert ex.modifiers == {}
    model.zero_grad(set_to_none=True)
    report = ex.run()
    assert not any(p.modified_by for p in report.params)
    assert report.param_norms == pytest.approx(norms(original), rel=1e-6)


def test_modifier_through_the_fallback_on_resnet() -> None:
    torch.manual_seed(0)
    model = resnet18(num_classes=5, width=8)
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([0, 3])
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    plain = ex.run()
    ex.set_hook("layer1.0.bn1")  # needs the fallback (in-place ReLU after it)
    ex.set_modifier("layer2.0", scale=0.5)
    report = ex.run()
    assert ex.hook_mechanisms["layer1.0.bn1"] == "tensor hooks (fallback)"
    upstream = {n for n in plain.param_norms if n.startswith(("conv1.", "bn1.", "layer1."))}
    flagged = {p.name for p in report.params if p.modified_by}
    assert flagged == upstream
    for name in upstream:
        assert report.param_norms[name] == pytest.approx(0.5 * plain.param_norms[name], rel=1e-6)
        assert report.param(name).norm_before == plain.param_norms[name]
    for name in set(plain.param_norms) - upstream:
        assert report.param_norms[name] == plain.param_norms[name]


def test_modifier_arguments() -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    with pytest.raises(GradExplorerError, match="one modifier at a time"):
        ex.set_modifier("fc2", scale=0.5, clip_value=1.0)
    for bad in ({"clip_norm": 0.0}, {"clip_value": -1.0}):
        with pytest.raises(GradExplorerError, match="positive"):
            ex.set_modifier("fc2", **bad)
    assert ex.modifiers == {}
    with pytest.raises(ValueError, match="modifier kind"):
        Modifier("clip", 1.0)


def test_modifier_apply() -> None:
    g = [torch.tensor([3.0, 4.0]), None, torch.tensor([0.0, 12.0])]  # total norm 13
    kept = [t.clone() if t is not None else None for t in g]
    out = Modifier("clip_norm", 1.3).apply(g)
    assert out[1] is None
    torch.testing.assert_close(out[0], torch.tensor([0.3, 0.4]), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out[2], torch.tensor([0.0, 1.2]), rtol=1e-5, atol=1e-6)
    assert all((a is None and b is None) or torch.equal(a, b) for a, b in zip(g, kept))  # unchanged
    assert Modifier("clip_norm", 20.0).apply(g)[0].tolist() == [3.0, 4.0]
    assert Modifier("clip_value", 3.5).apply(g)[2].tolist() == [0.0, 3.5]
    assert Modifier("scale", 2.0).apply(g)[0].tolist() == [6.0, 8.0]
    assert Modifier("scale", 2.0).apply([None, None]) == [None, None]
    half = Modifier("clip_norm", 1.0).apply([torch.tensor([300.0, 400.0], dtype=torch.float16)])[0]
    assert half.dtype == torch.float16 and half.float().norm().item() == pytest.approx(
        1.0, rel=1e-3
    )
    assert Modifier("clip_value", 0.25).describe() == "clip by value 0.25"
    # complex gradients are clipped by their modulus, as clip_grad_norm_ does
    z = Modifier("clip_norm", 1.0).apply([torch.tensor([3 + 4j, 0j], dtype=torch.complex64)])[0]
    torch.testing.assert_close(z, torch.tensor([0.6 + 0.8j, 0j], dtype=torch.complex64))
