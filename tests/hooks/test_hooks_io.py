"""Hooks on modules with several inputs / outputs and keyword arguments, on the first layer,
inside torch.utils.checkpoint; their overhead and the toggle bookkeeping."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from hook_manual import assert_stats, grad_of, manual, only
from small_models import CE, data, mlp
from torch import nn
from torch.utils.checkpoint import checkpoint

from gradviz_widgets import GradExplorer, GradExplorerError


# ---- several inputs / outputs, keyword arguments, first layer -------------------------------------------
class Mix(nn.Module):
    def forward(self, a, b, *, scale):
        return a * b * scale, a + b


class MixNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fa, self.fb, self.fs = nn.Linear(4, 5), nn.Linear(4, 5), nn.Linear(4, 5)
        self.mix = Mix()
        self.head = nn.Linear(5, 3)

    def forward(self, x):
        p, s = self.mix(self.fa(x), self.fb(x), scale=self.fs(x))
        return self.head(torch.tanh(p) + 0.5 * s)


def test_module_with_several_inputs_and_outputs() -> None:
    torch.manual_seed(0)
    model, (x, y) = MixNet(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
    for kind in ("forward_pre", "forward", "backward"):
        ex.set_hook("mix", kind)
    ex.run()
    net = copy.deepcopy(model)
    seen = {}
    net.mix.register_forward_hook(
        lambda m, args, kwargs, out: seen.update(args=args, kwargs=kwargs, out=out),
        with_kwargs=True,
    )
    loss = CE(net(x), y)
    a, b = seen["args"]
    scale = seen["kwargs"]["scale"]
    p, s = seen["out"]
    g_p, g_s, g_a, g_b = grad_of(loss, [p, s, a, b])

    (pre,) = only(ex.events, "mix", "forward_pre")
    assert len(pre.tensors["input"]) == 3  # a, b and the keyword argument
    for stats, t in zip(pre.tensors["input"], (a, b, scale)):
        assert_stats(stats, t)
    (fwd,) = only(ex.events, "mix", "forward")
    assert_stats(fwd.tensors["output"][0], p)
    assert_stats(fwd.tensors["output"][1], s)
    (bwd,) = only(ex.events, "mix", "backward")
    assert len(bwd.tensors["grad_output"]) == 2 and len(bwd.tensors["grad_input"]) == 2
    torch.testing.assert_close(bwd.raw["grad_output"][0], g_p)
    torch.testing.assert_close(bwd.raw["grad_output"][1], g_s)
    # register_full_backward_hook reports positional inputs only (not `scale`)
    torch.testing.assert_close(bwd.raw["grad_input"][0], g_a)
    torch.testing.assert_close(bwd.raw["grad_input"][1], g_b)
    torch.testing.assert_close(g_a, g_p * b * scale + g_s)  # by the chain rule


def test_first_layer_with_no_input_requiring_grad() -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    ex.set_hook("fc1")
    ex.set_hook("fc1", "forward_pre")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ex.run()
    assert not [w for w in caught if "Full backward hook" in str(w.message)]
    (bwd,) = only(ex.events, "fc1", "backward")
    assert bwd.tensors["grad_input"] == (None,)  # x does not require grad
    _, loss, seen = manual(model, x, ["fc1"], target=y)
    (g_out,) = grad_of(loss, [seen["fc1"]["outputs"][0]])
    assert_stats(bwd.tensors["grad_output"][0], g_out)
    (pre,) = only(ex.events, "fc1", "forward_pre")
    assert_stats(pre.tensors["input"][0], x)

    # an input that requires grad gets its gradient
    xg = x.clone().requires_grad_(True)
    ex = GradExplorer(model, xg, loss_fn=CE, target=y)
    ex.set_hook("fc1")
    ex.run()
    (bwd,) = ex.events
    assert_stats(bwd.tensors["grad_input"][0], g_out @ model.fc1.weight.detach())


# ---- torch.utils.checkpoint ------------------------------------------------------------------------------
class Checkpointed(nn.Module):
    def __init__(self, reentrant: bool | None):
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.inner = nn.Sequential(nn.Linear(6, 6), nn.Tanh())
        self.b = nn.Linear(6, 3)
        self.reentrant = reentrant  # None: no checkpoint

    def forward(self, x):
        h = self.a(x)
        if self.reentrant is None:
            h = self.inner(h)
        else:
            h = checkpoint(self.inner, h, use_reentrant=self.reentrant)
        return self.b(h)


@pytest.mark.parametrize("reentrant", [False, True])
def test_hooks_inside_checkpoint(reentrant: bool) -> None:
    torch.manual_seed(0)
    model, (x, y) = Checkpointed(reentrant), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
    for kind in ("forward_pre", "forward", "backward"):
        ex.set_hook("inner.0", kind)
    report = ex.run()
    assert ex.hook_mechanisms == {"inner.0": "full backward hook"}

    plain = copy.deepcopy(model)
    plain.reentrant = None
    plain, loss, seen = manual(plain, x, ["inner.0"], target=y)
    (inp,), out = seen["inner.0"]["inputs"][0], seen["inner.0"]["outputs"][0]
    g_out, g_in = grad_of(loss, [out, inp])

    # forward hooks fire in forward and again when checkpoint recomputes during backward
    for kind in ("forward_pre", "forward"):
        events = only(ex.events, "inner.0", kind)
        assert [(e.call, e.phase) for e in events] == [(0, "forward"), (1, "recompute")]
        for e in events:
            torch.testing.assert_close(e.raw["input"][0], inp)
    for e in only(ex.events, "inner.0", "forward"):
        torch.testing.assert_close(e.raw["output"][0], out)
    (bwd,) = only(ex.events, "inner.0", "backward")
    # reentrant: the graph backward runs through is the one the recomputation (call 1) built
    assert (bwd.call, bwd.phase) == (1 if reentrant else 0, "backward")
    torch.testing.assert_close(bwd.raw["grad_output"][0], g_out)
    torch.testing.assert_close(bwd.raw["grad_input"][0], g_in)

    # parameter gradients are right and land nowhere in the model
    loss.backward()
    for name, p in plain.named_parameters():
        assert report.param_norms[name] == pytest.approx(p.grad.double().norm().item(), rel=1e-5)
    assert all(p.grad is None for p in model.parameters())


def test_tensor_hook_inside_non_reentrant_checkpoint() -> None:
    torch.manual_seed(0)
    model, (x, y) = Checkpointed(False), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    assert "inner.1/TanhBackward0#0" in {n.id for n in ex.graph.nodes}
    ex.set_hook("inner.1/TanhBackward0#0")
    ex.run()
    plain = copy.deepcopy(model)
    plain.reentrant = None
    _, loss, seen = manual(plain, x, ["inner.1"], target=y)
    (g,) = grad_of(loss, [seen["inner.1"]["outputs"][0]])
    (e,) = ex.events
    assert (e.kind, e.phase) == ("tensor", "backward")
    assert_stats(e.tensors["grad_output"][0], g)


# ---- overhead -------------------------------------------------------------------------------------------
def test_hook_overhead_is_reported() -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    report = ex.run()
    assert ex.hook_seconds == 0.0
    for kind in ("forward_pre", "forward", "backward"):
        ex.set_hook("fc2", kind)
    ex.set_hook("fc2/AddmmBackward0#0", "tensor")
    report = ex.run()
    assert 0 < ex.hook_seconds < report.duration_s
    assert all(e.seconds > 0 for e in ex.events)
    assert sum(e.seconds for e in ex.events) <= ex.hook_seconds


def test_toggle_and_set_hook_bookkeeping() -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    assert ex.toggle_hook("fc2") is True
    assert ex.toggle_hook("fc2", "forward") is True
    assert ex.hooks == [("fc2", "backward"), ("fc2", "forward")]
    assert ex.toggle_hook("fc2") is False
    assert ex.set_hook("fc2", "forward", on=False) is False
    assert ex.hooks == []
    ex.run()
    assert ex.events == []
    with pytest.raises(GradExplorerError, match="hook kind"):
        ex.set_hook("fc2", "sideways")
    with pytest.raises(GradExplorerError, match="graph node id"):
        ex.set_hook("fc2", "tensor")
    ex.set_hook("", "forward")  # the root module
    ex.run()
    (e,) = ex.events
    assert e.target == "" and e.tensors["output"][0].shape == (8, 3)
