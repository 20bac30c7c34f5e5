"""Value checks of GradExplorer hooks: what each hook kind reports equals what a user computes by
hand (autograd.grad / retain_grad on a deepcopy with plain forward hooks). Tiny models, CPU."""

from __future__ import annotations

import copy
import math
import warnings

import pytest
import torch
from small_models import CE, data, mlp
from torch import nn
from torch.utils._pytree import tree_map
from torch.utils.checkpoint import checkpoint

from gradviz_widgets import GradExplorer, GradExplorerError, HookEvent
from gradviz_widgets.examples import UnrolledLSTM, resnet18
from gradviz_widgets.stats import NormBatch
from gradviz_widgets.tensor_stats import HIST_BINS, queue_stats, read_stats


def manual(model: nn.Module, x, paths, loss_fn=CE, target=None, clone_output=(), outside=()):
    """On a deepcopy: the loss, and the inputs and outputs of the modules at `paths` (plain
    forward hooks). `clone_output` paths hand a clone on to the rest of the model, so an in-place
    op after them does not change the saved output. `outside` paths save the clones they hand on
    instead, so d loss / d output is only the gradient from outside the module (what a full
    backward hook reports), not also from the module's own use of an output."""
    net = copy.deepcopy(model)
    modules = dict(net.named_modules())
    seen: dict[str, dict] = {p: {"inputs": [], "outputs": []} for p in paths}

    def fwd(path):
        def hook(module, args, output):
            seen[path]["inputs"].append(args)
            if path in outside:
                output = tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, output)
            seen[path]["outputs"].append(output)
            if path in clone_output or path in outside:
                return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, output)

        return hook

    handles = [modules[p].register_forward_hook(fwd(p)) for p in paths]
    out = net(*x) if isinstance(x, tuple) else net(x)
    loss = loss_fn(out, target) if target is not None else loss_fn(out)
    for h in handles:
        h.remove()
    return net, loss, seen


def grad_of(loss, tensors):
    return torch.autograd.grad(loss, tensors, retain_graph=True, allow_unused=True)


def assert_stats(stats, t: torch.Tensor, rel: float = 1e-5) -> None:
    """TensorStats `stats` describe tensor `t`."""
    assert stats is not None
    assert stats.shape == tuple(t.shape)
    assert stats.dtype == str(t.dtype).replace("torch.", "")
    d = t.detach().double()
    assert stats.norm == pytest.approx(d.norm().item(), rel=rel, abs=1e-12)
    assert stats.min == pytest.approx(d.min().item(), rel=rel, abs=1e-12)
    assert stats.max == pytest.approx(d.max().item(), rel=rel, abs=1e-12)
    assert stats.mean == pytest.approx(d.mean().item(), rel=rel, abs=1e-9)
    assert stats.nan == 0 and stats.inf == 0
    assert sum(stats.histogram) == t.numel()


def only(events: list[HookEvent], target: str, kind: str) -> list[HookEvent]:
    return [e for e in events if e.target == target and e.kind == kind]


# ---- each kind on an MLP ---------------------------------------------------------------------------
def test_backward_hook_equals_manual_gradients() -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    assert ex.toggle_hook("fc2") is True
    assert ex.hooks == [("fc2", "backward")]
    ex.run()
    (event,) = ex.events
    assert (event.target, event.kind, event.call, event.phase) == ("fc2", "backward", 0, "backward")
    assert event.mechanism == "full backward hook"
    assert set(event.tensors) == {"grad_output", "grad_input"}

    net, loss, seen = manual(model, x, ["fc2"], target=y)
    (inp,), out = seen["fc2"]["inputs"][0], seen["fc2"]["outputs"][0]
    g_out, g_in = grad_of(loss, [out, inp])
    torch.testing.assert_close(g_in, g_out @ net.fc2.weight)  # the layer's own math
    (go,), (gi,) = event.tensors["grad_output"], event.tensors["grad_input"]
    assert go.shape == (8, 5) and gi.shape == (8, 6)
    assert_stats(go, g_out)
    assert_stats(gi, g_out @ net.fc2.weight)


def test_forward_pre_and_forward_hooks_report_actual_tensors() -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    ex.set_hook("fc2", "forward_pre")
    ex.set_hook("act2", "forward")
    ex.run()
    _, _, seen = manual(model, x, ["fc2", "act2"], target=y)
    (pre,) = only(ex.events, "fc2", "forward_pre")
    assert (pre.call, pre.phase, pre.mechanism) == (0, "forward", "forward pre hook")
    assert set(pre.tensors) == {"input"}
    assert_stats(pre.tensors["input"][0], seen["fc2"]["inputs"][0][0])
    (fwd,) = only(ex.events, "act2", "forward")
    assert (fwd.call, fwd.phase) == (0, "forward")
    assert_stats(fwd.tensors["input"][0], seen["act2"]["inputs"][0][0])
    out = seen["act2"]["outputs"][0]
    assert_stats(fwd.tensors["output"][0], out)
    assert fwd.tensors["output"][0].min == 0.0  # ReLU output
    assert fwd.modifier is None and fwd.raw is None


def test_tensor_hook_equals_retain_grad() -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    ids = {n.id for n in ex.graph.nodes}
    assert {"act1/TanhBackward0#0", "fc2/AddmmBackward0#0"} <= ids
    assert ex.toggle_hook("act1/TanhBackward0#0") is True  # graph node ids default to "tensor"
    ex.set_hook("fc2/AddmmBackward0#0", "tensor")
    ex.run()

    net = copy.deepcopy(model)
    kept = {}

    def keep(name):
        def hook(module, args, output):
            output.retain_grad()
            kept[name] = output

        return hook

    net.act1.register_forward_hook(keep("act1"))
    net.fc2.register_forward_hook(keep("fc2"))
    CE(net(x), y).backward()
    for target, name in [("act1/TanhBackward0#0", "act1"), ("fc2/AddmmBackward0#0", "fc2")]:
        (e,) = only(ex.events, target, "tensor")
        assert (e.call, e.phase, e.mechanism) == (0, "backward", "autograd node pre-hook")
        assert_stats(e.tensors["grad_output"][0], kept[name].grad)


def test_keep_tensors_gives_raw_tensors_default_keeps_none() -> None:
    model, (x, y) = mlp(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    for kind in ("forward_pre", "forward", "backward"):
        ex.set_hook("fc2", kind)
    ex.run()
    assert all(e.raw is None for e in ex.events) and len(ex.events) == 3

    ex = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
    for kind in ("forward_pre", "forward", "backward"):
        ex.set_hook("fc2", kind)
    ex.run()
    net, loss, seen = manual(model, x, ["fc2"], target=y)
    (inp,), out = seen["fc2"]["inputs"][0], seen["fc2"]["outputs"][0]
    g_out, g_in = grad_of(loss, [out, inp])
    (pre,) = only(ex.events, "fc2", "forward_pre")
    (fwd,) = only(ex.events, "fc2", "forward")
    (bwd,) = only(ex.events, "fc2", "backward")
    torch.testing.assert_close(pre.raw["input"][0], inp)
    torch.testing.assert_close(fwd.raw["output"][0], out)
    torch.testing.assert_close(bwd.raw["grad_output"][0], g_out)
    torch.testing.assert_close(bwd.raw["grad_input"][0], g_in)
    assert not bwd.raw["grad_input"][0].requires_grad  # detached copies


def test_nan_inf_counts_and_histogram() -> None:
    class Poison(nn.Module):
        def forward(self, x):
            out = x * 1.0
            out[0, 0] = math.nan
            out[1, 1] = math.inf
            out[2, 2] = -math.inf
            return out

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 6)
            self.poison = Poison()
            self.head = nn.Linear(6, 3)

        def forward(self, x):
            return self.head(torch.nan_to_num(self.poison(self.fc(x)), 0.0, 0.0, 0.0))

    torch.manual_seed(0)
    model, (x, y) = Net(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    ex.set_hook("poison", "forward")
    ex.run()
    (e,) = ex.events
    s = e.tensors["output"][0]
    assert (s.nan, s.inf) == (1, 2)
    assert math.isnan(s.norm)
    assert sum(s.histogram) == 8 * 6 - 3  # the finite elements
    out = model.fc(x).detach()
    finite = out.clone()
    finite[0, 0], finite[1, 1], finite[2, 2] = math.nan, math.inf, -math.inf
    values = finite[torch.isfinite(finite)].double()
    assert s.min == pytest.approx(values.min().item()) and s.max == pytest.approx(
        values.max().item()
    )
    assert s.mean == pytest.approx(values.mean().item())
    assert e.tensors["input"][0].nan == 0 and sum(e.tensors["input"][0].histogram) == 48


def test_tensor_stats_histogram_and_edge_cases() -> None:
    batch = NormBatch(torch.device("cpu"))
    ramp = queue_stats(torch.arange(16.0), batch)
    mixed = queue_stats(torch.tensor([1.0, math.nan, 3.0, math.inf, -math.inf, 2.0]), batch)
    const = queue_stats(torch.full((5,), 2.5), batch)
    empty = queue_stats(torch.zeros(0, 3), batch)
    bad = queue_stats(torch.tensor([math.nan, math.inf]), batch)
    ints = queue_stats(torch.tensor([[1, 2], [3, 4]]), batch)
    half = queue_stats(torch.tensor([1e-30, 2e-30], dtype=torch.float16), batch)
    values = batch.resolve()
    assert batch.syncs == 1
    r = read_stats(ramp, values)
    assert r.histogram == (1,) * HIST_BINS and (r.min, r.max, r.mean) == (0.0, 15.0, 7.5)
    assert r.norm == pytest.approx(math.sqrt(sum(i * i for i in range(16))))
    m = read_stats(mixed, values)
    assert (m.nan, m.inf, sum(m.histogram), m.min, m.max, m.mean) == (1, 2, 3, 1.0, 3.0, 2.0)
    assert m.histogram[0] == 1 and m.histogram[-1] == 1
    c = read_stats(const, values)
    assert sum(c.histogram) == 5 and c.min == c.max == c.mean == 2.5
    e = read_stats(empty, values)
    assert e.shape == (0, 3) and e.norm == 0 and sum(e.histogram) == 0 and math.isnan(e.min)
    b = read_stats(bad, values)
    assert (b.nan, b.inf, sum(b.histogram)) == (1, 1, 0) and math.isnan(b.mean)
    i = read_stats(ints, values)
    assert (i.dtype, i.min, i.max, i.mean, sum(i.histogram)) == ("int64", 1.0, 4.0, 2.5, 4)
    h = read_stats(half, values)  # float16 underflows to 0: stats are of the tensor as stored
    assert h.dtype == "float16" and h.max == 0.0 and sum(h.histogram) == 2


# ---- modules called several times ---------------------------------------------------------------------
def test_call_index_for_a_module_called_steps_times() -> None:
    torch.manual_seed(0)
    steps = 4
    model = UnrolledLSTM(input_size=3, hidden=5, steps=steps, num_classes=4)
    x, y = torch.randn(2, steps, 3), torch.tensor([1, 3])
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    ex.set_hook("cell", "forward")
    ex.set_hook("cell", "backward")
    ex.run()
    fwd = only(ex.events, "cell", "forward")
    bwd = only(ex.events, "cell", "backward")
    assert [e.call for e in fwd] == list(range(steps))
    assert all(e.phase == "forward" for e in fwd)
    # backward reaches the calls last-first; `call` still names the forward call
    assert [e.call for e in bwd] == list(reversed(range(steps)))
    assert all(e.phase == "backward" for e in bwd)

    _, loss, seen = manual(model, x, ["cell"], target=y, outside={"cell"})
    for k in range(steps):
        h, c = seen["cell"]["outputs"][k]
        assert_stats(fwd[k].tensors["output"][0], h)
        assert_stats(fwd[k].tensors["output"][1], c)
        g_h, g_c = grad_of(loss, [h, c])
        (event,) = [e for e in bwd if e.call == k]
        assert_stats(event.tensors["grad_output"][0], g_h)
        if g_c is None:  # the last cell state is not used
            assert event.tensors["grad_output"][1] is None
        else:
            assert_stats(event.tensors["grad_output"][1], g_c)
        # the input slice x[:, t] does not require grad; (h, c) is a tuple argument, which
        # register_full_backward_hook does not look into
        assert event.tensors["grad_input"] == (None, None)


# ---- ResNet with in-place ReLU: the fallback -------------------------------------------------------------
@pytest.fixture(scope="module")
def resnet_case():
    torch.manual_seed(0)
    model = resnet18(num_classes=5, width=8)
    g = torch.Generator().manual_seed(2)
    return model, torch.randn(2, 3, 32, 32, generator=g), torch.tensor([1, 4])


def test_resnet_inplace_relu_backward_hooks_fall_back(resnet_case) -> None:
    model, x, y = resnet_case
    targets = ["layer1.0.bn1", "layer1.0.conv1", "layer2.0"]
    ex = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
    for t in targets:
        ex.toggle_hook(t)
    report = ex.run()
    assert ex.hook_mechanisms == {t: "tensor hooks (fallback)" for t in targets}
    assert {e.target for e in ex.events} == set(targets)
    assert all(e.kind == "backward" and e.call == 0 and e.phase == "backward" for e in ex.events)
    assert all("fallback" in e.mechanism for e in ex.events)

    # by hand: d loss / d (bn1 output before the in-place ReLU), and the other gradients
    _, loss, seen = manual(model, x, targets, target=y, clone_output={"layer1.0.bn1"})
    bn_out = seen["layer1.0.bn1"]["outputs"][0]
    conv_in, conv_out = seen["layer1.0.conv1"]["inputs"][0][0], seen["layer1.0.conv1"]["outputs"][0]
    blk_in, blk_out = seen["layer2.0"]["inputs"][0][0], seen["layer2.0"]["outputs"][0]
    g = dict(
        zip(
            ["bn_out", "conv_in", "conv_out", "blk_in", "blk_out"],
            grad_of(loss, [bn_out, conv_in, conv_out, blk_in, blk_out]),
        )
    )
    by_target = {e.target: e for e in ex.events}
    bn = by_target["layer1.0.bn1"]
    torch.testing.assert_close(bn.raw["grad_output"][0], g["bn_out"])
    assert_stats(bn.tensors["grad_output"][0], g["bn_out"])
    # the in-place ReLU zeroes part of it afterwards: the value before it is what we want
    assert (g["bn_out"] != 0).sum() > 0
    torch.testing.assert_close(bn.raw["grad_input"][0], g["conv_out"])  # bn1 input = conv1 output
    conv = by_target["layer1.0.conv1"]
    torch.testing.assert_close(conv.raw["grad_output"][0], g["conv_out"])
    # conv1's input is also the block's identity: grad_input is only what flows back through conv1
    (through_conv,) = torch.autograd.grad(conv_out, conv_in, g["conv_out"], retain_graph=True)
    assert not torch.allclose(through_conv, g["conv_in"])
    torch.testing.assert_close(conv.raw["grad_input"][0], through_conv)
    blk = by_target["layer2.0"]
    assert blk.tensors["grad_output"][0].shape == (2, 16, 4, 4)
    torch.testing.assert_close(blk.raw["grad_output"][0], g["blk_out"])
    torch.testing.assert_close(blk.raw["grad_input"][0], g["blk_in"])
    # the fallback changes no gradient: the report equals a hook-free run
    plain = GradExplorer(model, x, loss_fn=CE, target=y).run()
    assert report.param_norms == pytest.approx(plain.param_norms, rel=1e-6)


def test_resnet_hook_on_the_inplace_relu_module_itself(resnet_case) -> None:
    model, x, y = resnet_case
    ex = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
    ex.set_hook("layer1.0.relu")
    ex.set_hook("layer1.0.relu", "forward")
    ex.run()
    assert ex.hook_mechanisms == {"layer1.0.relu": "tensor hooks (fallback)"}
    # the block calls its ReLU twice: both calls are reported, matched to their forward call
    assert [e.call for e in only(ex.events, "layer1.0.relu", "forward")] == [0, 1]
    bwd = only(ex.events, "layer1.0.relu", "backward")
    assert sorted(e.call for e in bwd) == [0, 1]
    # call 0 is relu(bn1(...)): its input gradient is d loss / d bn1 output
    _, loss, seen = manual(model, x, ["layer1.0.bn1"], target=y, clone_output={"layer1.0.bn1"})
    (g_bn,) = grad_of(loss, [seen["layer1.0.bn1"]["outputs"][0]])
    (first,) = [e for e in bwd if e.call == 0]
    torch.testing.assert_close(first.raw["grad_input"][0], g_bn)


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


def test_module_returning_a_dict_falls_back() -> None:
    """register_full_backward_hook only sees Tensor / tuple outputs (torch warns and skips
    anything else); such a module gets tensor hooks instead."""

    class Dict(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 5)

        def forward(self, x):
            return {"y": self.fc(x), "n": 3}

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.d, self.head = Dict(), nn.Linear(5, 3)

        def forward(self, x):
            return self.head(torch.relu(self.d(x)["y"]))

    torch.manual_seed(0)
    model, (x, y) = Net(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
    ex.set_hook("d")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ex.run()
    assert ex.hook_mechanisms == {"d": "tensor hooks (fallback)"}
    (e,) = ex.events
    assert "returns a dict" in e.mechanism
    _, loss, seen = manual(model, x, ["d"], target=y)
    (g,) = grad_of(loss, [seen["d"]["outputs"][0]["y"]])
    torch.testing.assert_close(e.raw["grad_output"][0], g)
    assert e.tensors["grad_input"] == (None,)


class InPlaceCheckpointed(nn.Module):
    """A ResNet block (in-place ReLUs) under checkpoint: the fallback inside recomputation."""

    def __init__(self, reentrant: bool | None):
        super().__init__()
        from gradviz_widgets.examples import BasicBlock

        self.stem, self.block = nn.Conv2d(3, 4, 3, padding=1), BasicBlock(4, 4)
        self.head, self.reentrant = nn.Linear(4, 3), reentrant

    def forward(self, x):
        h = self.stem(x)
        if self.reentrant is None:
            h = self.block(h)
        else:
            h = checkpoint(self.block, h, use_reentrant=self.reentrant)
        return self.head(h.mean((2, 3)))


def test_fallback_inside_checkpoint_matches_no_checkpoint() -> None:
    torch.manual_seed(0)
    base = InPlaceCheckpointed(None)
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([0, 2])
    runs = {}
    for reentrant in (None, False, True):
        model = copy.deepcopy(base)
        model.reentrant = reentrant
        ex = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
        ex.set_hook("block.bn1")
        ex.set_hook("block.relu")
        report = ex.run()
        assert ex.hook_mechanisms == {
            "block.bn1": "tensor hooks (fallback)",
            "block.relu": "tensor hooks (fallback)",
        }
        runs[reentrant] = report, ex.events
    plain_report, plain_events = runs[None]
    for reentrant in (False, True):
        report, events = runs[reentrant]
        assert report.param_norms == pytest.approx(plain_report.param_norms, rel=1e-6)
        # the same firings (no empty events from the recomputation); reentrant numbers the calls
        # of the recomputation, which built the graph backward runs through
        offset = (
            {"block.bn1": 1, "block.relu": 2} if reentrant else {"block.bn1": 0, "block.relu": 0}
        )
        assert sorted((e.target, e.call - offset[e.target]) for e in events) == sorted(
            (e.target, e.call) for e in plain_events
        )
        for e in events:
            (twin,) = [
                p
                for p in plain_events
                if p.target == e.target and p.call == e.call - offset[e.target]
            ]
            for key in ("grad_output", "grad_input"):
                for a, b in zip(e.raw[key], twin.raw[key]):
                    torch.testing.assert_close(a, b)


def test_hooks_do_not_shift_graph_node_ids() -> None:
    """Ids of a hook-free run stay valid with hooks on (tensor hooks and other tools use them):
    what hooks add to the graph gets op names of its own."""

    class Viewer(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(6, 3)

        def forward(self, x):
            return self.fc(torch.relu_(x.view(x.shape[0], 2, 3)).view(x.shape[0], -1))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc0, self.viewer = nn.Linear(4, 6), Viewer()

        def forward(self, x):
            return self.viewer(self.fc0(x))

    torch.manual_seed(0)
    model, (x, y) = Net(), data()
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    plain = [n.id for n in ex.graph.nodes]
    assert "viewer/ViewBackward0#0" in plain
    ex.set_hook("viewer")  # its input is modified in place (through a view): the fallback
    ex.set_hook("fc0")
    ex.set_hook("viewer.fc", "forward")
    ex.set_hook("viewer/ViewBackward0#0")
    ex.run()
    assert ex.hook_mechanisms["viewer"] == "tensor hooks (fallback)"
    hooked = [n.id for n in ex.graph.nodes]
    assert set(plain) <= set(hooked)
    added = {i.split("/")[-1].split("#")[0] for i in set(hooked) - set(plain)}
    assert added <= {"AliasBackward0", "BackwardHookFunctionBackward"}
    assert [e.target for e in ex.events if e.kind == "tensor"] == ["viewer/ViewBackward0#0"]
