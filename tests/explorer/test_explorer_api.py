"""GradExplorer session behaviour: validation at set time, mechanisms, history, close."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer, GradExplorerError


def test_bad_node_id_is_refused_when_set(dead_explorer):
    dead_explorer.run()
    with pytest.raises(GradExplorerError, match="ReluBackward0#1"):
        dead_explorer.toggle_hook("ReluBackward0#7")
    assert dead_explorer.hooks == []


def test_modifier_only_targets_report_their_mechanism(dead_explorer):
    dead_explorer.set_modifier("main2", clip_value=0.01)
    dead_explorer.run()
    assert dead_explorer.hook_mechanisms == {"main2": "full backward hook"}
    assert dead_explorer.modifiers == {"main2": "clip by value 0.01"}


def test_history_and_close(dead_explorer):
    dead_explorer.run()
    dead_explorer.run()
    assert len(dead_explorer.history) >= 2
    assert dead_explorer.history[-1].param_norms == dead_explorer.history[-2].param_norms
    dead_explorer.close()
    with pytest.raises(GradExplorerError, match="closed"):
        dead_explorer.run()


def test_zero_fraction_matches_plain_backward(dead_branch):
    import copy

    from torch import nn

    from gradviz_widgets import GradExplorer

    net, x, y = dead_branch
    twin = copy.deepcopy(net)
    nn.CrossEntropyLoss()(twin(x), y).backward()
    report = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y).run()
    for name, p in twin.named_parameters():
        assert report.param(name).zero_fraction == (p.grad == 0).float().mean().item(), name
    assert report.param("main1.weight").zero_fraction == 0.125  # one of 8 hidden units is dead
    assert report.host_syncs == 1


def test_failed_device_switch_leaves_the_device_as_it_was(dead_branch) -> None:
    """run(device=...) that fails keeps the explorer on its previous device."""
    net, x, y = dead_branch

    def bad_loss(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        raise ValueError("boom")

    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    ex.run()
    ex.loss_fn = bad_loss
    with pytest.raises(GradExplorerError):
        ex.run(device="cpu")
    assert ex.device is None  # still "where the model is", not switched


def test_modifier_objects_are_public(dead_branch) -> None:
    net, x, y = dead_branch
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    ex.set_modifier("main2", clip_norm=1.0)
    ((target, modifier),) = ex.modifier_objects.items()
    assert target == "main2" and modifier.kind == "clip_norm" and modifier.value == 1.0
    ex.modifier_objects.clear()  # a copy: the explorer keeps its modifiers
    assert ex.modifiers == {"main2": modifier.describe()}


def test_autocast_runs_every_forward_as_a_mixed_precision_step() -> None:
    """`autocast=torch.bfloat16`: each run's gradients are those of the same step under
    torch.autocast (a float64 reading of a plain backward under it), not float32's; the
    setting is part of what makes a run stale; outside the runs nothing is under autocast."""
    import copy

    from model_state import assert_unchanged, model_state

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x, y, ce = torch.randn(32, 8), torch.randint(0, 4, (32,)), nn.CrossEntropyLoss()
    ref = copy.deepcopy(net)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = ce(ref(x), y)
    loss.backward()
    before = model_state(net)
    ex = GradExplorer(net, x, loss_fn=ce, target=y, autocast=torch.bfloat16)
    for _ in range(2):  # a re-run (a widget's click) is under it too
        norms = ex.run().param_norms
        for name, p in ref.named_parameters():
            assert norms[name] == pytest.approx(p.grad.double().norm().item(), rel=1e-12), name
    assert not torch.is_autocast_enabled("cpu")
    assert ex.report.loss_description.endswith(", under autocast(bfloat16)")  # the loss line
    assert_unchanged(net, before)
    ex.autocast = None
    assert ex.stale
    plain = ex.run().param_norms["0.weight"]
    assert "autocast" not in ex.report.loss_description
    assert abs(plain / norms["0.weight"] - 1) > 1e-4
    with pytest.raises(GradExplorerError, match="autocast must be None"):
        GradExplorer(net, x, autocast=torch.float32)
