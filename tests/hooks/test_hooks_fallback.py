"""The backward-hook fallback (tensor hooks where register_full_backward_hook cannot work: an
in-place ReLU after the module, a module returning a dict, a user's non-full backward hook),
its values against a hand computation, inside checkpoint, and graph ids unchanged by hooks."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from hook_manual import assert_stats, grad_of, manual, only
from small_models import CE, data
from test_hooks_cleanup import snapshot
from torch import nn
from torch.utils.checkpoint import checkpoint

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import UnrolledLSTM, resnet18


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


def test_module_with_a_users_non_full_backward_hook() -> None:
    """torch refuses register_full_backward_hook next to register_backward_hook: the explorer
    falls back to tensor hooks there, and a run leaves the user free to add either kind."""
    torch.manual_seed(0)
    steps = 3
    model = UnrolledLSTM(input_size=3, hidden=4, steps=steps, num_classes=3)
    x, y = torch.randn(2, steps, 3), torch.tensor([0, 2])
    fresh = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
    fresh.set_hook("cell")
    fresh.run()
    assert fresh.hook_mechanisms == {"cell": "full backward hook"}
    # a run does not leave the module marked as having full backward hooks
    assert model.cell._is_full_backward_hook is None
    seen = []
    model.cell.register_backward_hook(lambda m, gi, go: seen.append(1))  # would raise otherwise
    before = snapshot(model)
    ex = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
    ex.set_hook("cell")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch's, about the user's hook
        ex.run()
    assert ex.hook_mechanisms == {"cell": "tensor hooks (fallback)"}
    assert snapshot(model) == before
    assert seen  # the user's hook fired in the run
    full = {e.call: e for e in fresh.events}
    fallback = {e.call: e for e in ex.events}
    assert sorted(fallback) == list(range(steps))
    for k in range(steps):
        assert "non-full backward hook" in fallback[k].mechanism
        # grad_output of h: the same from both mechanisms
        torch.testing.assert_close(fallback[k].raw["grad_output"][0], full[k].raw["grad_output"][0])
        # grad_input: the fallback also sees inside the (h, c) tuple: slots x_t, h, c
        assert len(fallback[k].tensors["grad_input"]) == 3
        assert fallback[k].tensors["grad_input"][0] is None  # x[:, t] needs no grad
        if k == 0:  # the zero initial state needs no grad either
            assert fallback[k].tensors["grad_input"][1:] == (None, None)
        else:  # what flows into h_{k-1} is the grad_output of h at call k-1
            torch.testing.assert_close(
                fallback[k].raw["grad_input"][1], fallback[k - 1].raw["grad_output"][0]
            )
