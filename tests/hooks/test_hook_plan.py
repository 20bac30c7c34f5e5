"""What the user turned on (HookPlan) is kept apart from what one run registered and recorded
(HookRecord on Capture.hooks) and from what runs learned (HookFacts): no run changes the plan."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer, GradExplorerError
from gradviz_widgets.examples import resnet18
from gradviz_widgets.hooks.modifiers import Modifier
from gradviz_widgets.hooks.plan import HookPlan
from gradviz_widgets.run.capture import capture, run
from gradviz_widgets.run.settings import RunSettings

CE = nn.CrossEntropyLoss()


def test_resnet_fallback_leaves_the_plan_as_it_was() -> None:
    torch.manual_seed(0)
    model = resnet18(num_classes=5, width=8)
    x, y = torch.randn(2, 3, 32, 32), torch.tensor([0, 3])
    ex = GradExplorer(model, x, loss_fn=CE, target=y)
    ex.set_hook("layer1.0.bn1")
    ex.set_hook("layer1.0.conv1", "forward")
    ex.set_modifier("layer2.0", scale=0.5)
    plan = ex.hook_plan
    copy = dataclasses.replace(plan)
    ex.run()
    assert ex.hook_plan is plan and plan == copy
    record = ex.hook_record
    assert record.clash is not None  # the first try clashed with the in-place ReLU
    assert dict(record.mechanisms) == {
        "layer1.0.bn1": "tensor hooks (fallback)",
        "layer2.0": "tensor hooks (fallback)",
    }
    assert set(record.facts.fallback) == {"layer1.0.bn1", "layer2.0"}
    assert record.registered > 0 and record.events == tuple(ex.events)
    assert ex._last is not None and ex._last.hooks is record
    ex.run()  # the fallback is a learned fact now: no clash, same plan
    assert ex.hook_record.clash is None and ex.hook_plan == copy
    assert ex.hook_mechanisms == dict(record.mechanisms)


def test_plan_is_a_value() -> None:
    plan = HookPlan().with_hook("fc").with_hook("fc", "forward")
    same = plan.with_hook("fc")  # already on: unchanged, order kept
    assert same == plan and same.active == [("fc", "backward"), ("fc", "forward")]
    scaled = plan.with_modifier("fc2", Modifier("scale", 0.5))
    assert plan.modifiers == {} and dict(scaled.modifiers) == {"fc2": Modifier("scale", 0.5)}
    assert scaled.with_modifier("fc2", None) == plan
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.on = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        scaled.modifiers["fc"] = Modifier("scale", 2.0)  # type: ignore[index]
    assert scaled.cleared() == HookPlan()


def test_explorer_replaces_its_plan_on_each_change() -> None:
    ex = GradExplorer(nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 2)), torch.randn(4, 3))
    first = ex.hook_plan
    assert ex.toggle_hook("0") is True
    assert first == HookPlan() and ex.hook_plan.active == [("0", "backward")]
    with pytest.raises(GradExplorerError, match="no module 'nope'"):
        ex.set_hook("nope")
    assert ex.hook_plan.active == [("0", "backward")]
    ex.clear_hooks()
    assert ex.hook_plan == first


def test_run_settings_is_one_value() -> None:
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.Linear(4, 2)), torch.randn(5, 3)
    settings = RunSettings.checked(seed=7, loss_fn=lambda out, *_: out.square().sum())
    by_value = run(model, x, settings)
    by_keywords = capture(model, x, seed=7, loss_fn=settings.loss_fn)
    assert by_value.report.param_norms == by_keywords.report.param_norms
    assert by_value.hooks is None
    with pytest.raises(GradExplorerError, match="seed must be an int"):
        RunSettings.checked(seed="7")
