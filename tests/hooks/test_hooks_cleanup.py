"""GradExplorer hooks leave nothing behind: the model's hook dicts are exactly as before after
runs, toggling, close(), failing runs and failing hooks; the user's own hooks keep working; the
explorer does not keep the model alive."""

from __future__ import annotations

import gc
import sys
import weakref
from collections import defaultdict

import pytest
import torch
from model_state import HOOK_DICTS
from small_models import CE, data, mlp
from torch import nn

from gradviz_widgets import GradExplorer, GradExplorerError
from gradviz_widgets.examples import resnet18

stats_module = sys.modules["gradviz_widgets.stats.tensor"]
modifiers_module = sys.modules["gradviz_widgets.hooks.modifiers"]


def snapshot(model: nn.Module) -> dict:
    """Every submodule's hook dicts (keys and the hook objects themselves) and the
    full-backward-hook flag; the parameters' tensor hooks and .grad."""
    state = {}
    for path, m in model.named_modules():
        for name in HOOK_DICTS:
            d = getattr(m, name, None)
            if d is not None:
                state[(path, name)] = [(k, id(v) if callable(v) else v) for k, v in d.items()]
        state[(path, "_is_full_backward_hook")] = m._is_full_backward_hook
    for name, p in model.named_parameters():
        state[("param", name)] = (p._backward_hooks, p.grad, p.requires_grad)
    return state


def all_kinds(ex: GradExplorer) -> None:
    for path in ("fc1", "fc2", "act2", ""):
        for kind in ("forward_pre", "forward", "backward"):
            ex.set_hook(path, kind)
    ex.set_hook("fc2/AddmmBackward0#0", "tensor")
    ex.set_modifier("act1", scale=0.5)


class UserHooks:
    """The user's own hooks on fc2, counting their calls."""

    def __init__(self, model: nn.Module) -> None:
        self.count: defaultdict[str, int] = defaultdict(int)
        m = model.fc2
        m.register_forward_pre_hook(lambda *a: self.bump("forward_pre"))
        m.register_forward_hook(lambda *a: self.bump("forward"))
        m.register_full_backward_pre_hook(lambda *a: self.bump("backward_pre"))
        m.register_full_backward_hook(lambda *a: self.bump("backward"))
        model.fc1.weight.register_hook(lambda g: self.bump("param"))

    def bump(self, name: str) -> None:
        self.count[name] += 1

    def plain_step(self, model: nn.Module, x, y) -> dict:
        before = dict(self.count)
        model.zero_grad(set_to_none=True)
        CE(model(x), y).backward()
        model.zero_grad(set_to_none=True)
        return {k: self.count[k] - before.get(k, 0) for k in self.count}


ONCE = {"forward_pre": 1, "forward": 1, "backward_pre": 1, "backward": 1, "param": 1}


def test_hook_dicts_unchanged_after_runs_toggles_and_close() -> None:
    model, (x, y) = mlp(), data()
    user = UserHooks(model)
    before = snapshot(model)
    ex = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
    all_kinds(ex)
    assert snapshot(model) == before  # toggling registers nothing
    ex.run()
    assert len(ex.events) > 10
    assert snapshot(model) == before
    ex.run()
    assert snapshot(model) == before
    # the user's module hooks and the parameter's tensor hook (carried to its stand-in) fired in
    # the explorer's runs (each backward once; a modifier's run has a second, unmodified one)
    # and still work afterwards
    assert user.count["forward"] >= 2 and user.count["backward"] >= 2
    assert user.count["param"] == user.count["backward"]
    assert user.plain_step(model, x, y) == ONCE
    for path, kind in list(ex.hooks):
        ex.toggle_hook(path, kind)
    ex.set_modifier("act1")
    assert ex.hooks == [] and ex.modifiers == {}
    ex.run()
    assert ex.events == []
    assert snapshot(model) == before
    all_kinds(ex)
    ex.run()
    ex.close()
    assert snapshot(model) == before and ex.hooks == [] and ex.events == []
    with pytest.raises(GradExplorerError, match="closed"):
        ex.run()
    assert user.plain_step(model, x, y) == ONCE


def test_hook_dicts_unchanged_after_the_resnet_fallback() -> None:
    torch.manual_seed(0)
    model = resnet18(num_classes=5, width=8)
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([0, 3])
    before = snapshot(model)
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    for path in ("layer1.0.bn1", "layer1.0.relu", "layer2.0", "layer2.0.conv1"):
        ex.set_hook(path)
    ex.set_hook("layer1.0.bn1", "forward")
    ex.set_modifier("layer2.0", clip_value=1e-3)
    ex.run()
    assert "tensor hooks (fallback)" in ex.hook_mechanisms.values()
    assert snapshot(model) == before
    ex.run()  # the fallback is remembered: no failing first attempt
    assert snapshot(model) == before
    # nothing was left on the model's tensors either: a plain step works and matches a fresh copy
    model.zero_grad(set_to_none=True)
    CE(model(x), y).backward()
    assert all(p.grad is not None for p in model.parameters())


def test_model_failing_in_forward_leaves_no_hooks() -> None:
    class Fails(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(4, 4), nn.Linear(4, 3)
            self.fail = False

        def forward(self, x):
            h = self.fc1(x)
            if self.fail:
                raise ValueError("boom")
            return self.fc2(h)

    model, (x, y) = Fails(), data()
    before = snapshot(model)
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    for path in ("fc1", "fc2"):
        for kind in ("forward_pre", "forward", "backward"):
            ex.set_hook(path, kind)
    ex.run()
    model.fail = True
    with pytest.raises(GradExplorerError, match="boom"):
        ex.run()
    assert snapshot(model) == before
    model.fail = False
    ex.run()
    assert {e.target for e in ex.events} == {"fc1", "fc2"}
    assert snapshot(model) == before


@pytest.mark.parametrize("kind", ["forward_pre", "forward", "backward", "tensor"])
def test_failing_hook_names_itself_and_leaves_no_hooks(kind, monkeypatch) -> None:
    model, (x, y) = mlp(), data()
    user = UserHooks(model)
    before = snapshot(model)
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    target = "fc2/AddmmBackward0#0" if kind == "tensor" else "fc2"
    ex.set_hook(target, kind)

    def broken(*args, **kwargs):
        raise RuntimeError("stats exploded")

    monkeypatch.setattr(stats_module, "queue_stats", broken)
    with pytest.raises(GradExplorerError) as info:
        ex.run()
    message = str(info.value)
    assert f"the {kind} hook on {target!r} failed" in message
    assert "stats exploded" in message and "on=False" in message
    assert snapshot(model) == before
    monkeypatch.undo()
    assert user.plain_step(model, x, y) == ONCE
    ex.run()  # works again once the hook does
    assert {e.target for e in ex.events} == {target}
    assert snapshot(model) == before


@pytest.mark.parametrize("target", ["fc2", "act1/TanhBackward0#0", "resnet:layer1.0.bn1"])
def test_failing_modifier_names_the_hook_and_leaves_no_hooks(target, monkeypatch) -> None:
    if target.startswith("resnet:"):  # a modifier on the fallback path
        torch.manual_seed(0)
        model, target = resnet18(num_classes=5, width=8), target.split(":", 1)[1]
        x, y = torch.randn(2, 3, 32, 32), torch.tensor([0, 3])
    else:
        model, (x, y) = mlp(), data()
    before = snapshot(model)
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    ex.set_modifier(target, scale=0.5)

    def broken(self, grads):
        raise ValueError("bad modifier")

    monkeypatch.setattr(modifiers_module.Modifier, "apply", broken)
    with pytest.raises(GradExplorerError) as info:
        ex.run()
    message = str(info.value)
    assert repr(target) in message and "scale by 0.5" in message and "bad modifier" in message
    assert f"ex.set_modifier({target!r})" in message
    assert snapshot(model) == before
    monkeypatch.undo()
    ex.run()
    assert snapshot(model) == before


def test_unknown_module_path_lists_close_matches_and_registers_nothing() -> None:
    model, (x, y) = mlp(), data()
    before = snapshot(model)
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    for call in (
        lambda: ex.toggle_hook("fc_2"),
        lambda: ex.set_hook("fc22", "forward"),
        lambda: ex.set_modifier("fc_2", scale=2.0),
    ):
        with pytest.raises(GradExplorerError, match=r"no module 'fc_?22?'.*did you mean 'fc2'"):
            call()
    assert ex.hooks == [] and ex.modifiers == {}
    assert snapshot(model) == before
    ex.run()
    assert ex.events == []


def test_unknown_graph_node_gives_a_clear_error_and_registers_nothing() -> None:
    model, (x, y) = mlp(), data()
    before = snapshot(model)
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    ex.set_hook("fc2", "forward")
    assert ex.toggle_hook("fc2/AddmmBackward0#7") is True
    with pytest.raises(GradExplorerError) as info:
        ex.run()
    message = str(info.value)
    assert "no op node 'fc2/AddmmBackward0#7'" in message
    assert "fc2/AddmmBackward0#0" in message  # a close match
    assert "on=False" in message
    assert snapshot(model) == before
    for bad in ("param:fc2.weight", "acc:param:fc2.weight", "output"):
        ex.set_hook("fc2/AddmmBackward0#7", "tensor", on=False)
        ex.set_hook(bad, "tensor")
        with pytest.raises(GradExplorerError, match="no op node"):
            ex.run()
        ex.set_hook(bad, "tensor", on=False)
    ex.run()
    assert [e.target for e in ex.events] == ["fc2"]
    assert snapshot(model) == before


def test_explorer_does_not_keep_the_model_alive() -> None:
    model, (x, y) = mlp(), data()
    ref = weakref.ref(model)
    ex = GradExplorer(model, x, loss_fn=CE, target=y, keep_tensors=True)
    all_kinds(ex)
    ex.run()
    events = ex.events
    del ex, model
    gc.collect()
    assert ref() is None
    assert events  # the events (plain data and detached copies) outlive both

    # after a failing run too
    model = mlp()
    ref = weakref.ref(model)
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    ex.set_hook("fc2/AddmmBackward0#9")
    with pytest.raises(GradExplorerError):
        ex.run()
    del ex, model
    gc.collect()
    assert ref() is None
