"""Value checks of GradExplorer hooks: what each hook kind reports equals what a user computes by
hand (autograd.grad / retain_grad on a deepcopy with plain forward hooks). Tiny models, CPU."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from hook_manual import assert_stats, grad_of, manual, only
from small_models import CE, data, mlp
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import UnrolledLSTM
from gradviz_widgets.stats.norms import NormBatch
from gradviz_widgets.stats.tensor import HIST_BINS, queue_stats, read_stats


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
