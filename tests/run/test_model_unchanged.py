"""Runs leave the model exactly as they found it, and hold on to nothing afterwards."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from model_state import assert_unchanged, model_state
from torch import nn
from torch.utils.checkpoint import checkpoint

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example, gpt2_like, resnet18


def several_runs(ex: GradExplorer, n: int = 3) -> list:
    return [ex.run() for _ in range(n)]


@pytest.mark.parametrize("training", [True, False])
def test_resnet_batchnorm_unchanged(training: bool) -> None:
    torch.manual_seed(0)
    model = resnet18(num_classes=4, width=4).train(training)
    model.layer1[0].bn1.eval()  # mixed flags must survive too
    x = torch.randn(2, 3, 32, 32)
    before = model_state(model)
    rng = torch.get_rng_state()
    ex = GradExplorer(model, x, loss_fn=nn.CrossEntropyLoss(), target=torch.tensor([0, 3]))
    reports = several_runs(ex)
    assert torch.equal(torch.get_rng_state(), rng)
    assert_unchanged(model, before)
    assert model.bn1.num_batches_tracked.item() == 0
    assert reports[0].param_norms == reports[-1].param_norms


def test_preset_grads_and_user_hooks_survive() -> None:
    net, x, y = dead_branch_example()
    nn.CrossEntropyLoss()(net(x), y).backward()  # a user mid-training: .grad already filled
    net.main2.bias.grad = None  # and one cleared
    net.gate.weight.requires_grad_(False)
    calls = []
    net.main1.register_forward_hook(lambda m, i, o: calls.append("fwd"))
    net.dead.register_full_backward_hook(lambda m, gi, go: calls.append("bwd"))
    net.main2.register_forward_pre_hook(lambda m, a: calls.append("pre"))
    before = model_state(net)
    rng = torch.get_rng_state()
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    reports = several_runs(ex)
    assert_unchanged(net, before)
    assert torch.equal(torch.get_rng_state(), rng)
    # the user's hooks ran during each run (the model was really called) ...
    assert calls.count("fwd") == 3 and calls.count("pre") == 3 and calls.count("bwd") == 3
    # ... and the run measured a fresh gradient, not the .grad that was there
    assert round(reports[0].param_norms["main1.weight"], 4) == 0.279
    assert reports[0].param_status["gate.weight"] == "none"


def test_explorer_hooks_removed_after_runs() -> None:
    net, x, y = dead_branch_example()
    before = model_state(net)
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    ex.toggle_hook("main1")
    ex.set_hook("dead", "forward")
    ex.set_hook("gate", "forward_pre")
    ex.set_modifier("main2", scale=0.5)
    several_runs(ex, 2)
    assert ex.events  # the hooks did fire
    assert_unchanged(net, before)
    ex.close()
    assert_unchanged(net, before)


def test_tied_weights_stay_tied() -> None:
    torch.manual_seed(0)
    model = gpt2_like(n_layer=1, d_model=8, n_head=2, vocab=16, seq=8)
    before = model_state(model)
    several_runs(GradExplorer(model, torch.randint(0, 16, (2, 5))), 2)
    assert model.lm_head.weight is model.wte.weight
    assert_unchanged(model, before)


class CheckpointedBN(nn.Module):
    """BatchNorm inside activation checkpointing: the recompute in backward must not touch the
    model's running stats."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.pre = nn.Linear(4, 6)
        self.block = nn.Sequential(nn.Linear(6, 6), nn.BatchNorm1d(6), nn.ReLU())
        self.head = nn.Linear(6, 2)
        self.reentrant = reentrant

    def forward(self, x):
        return self.head(checkpoint(self.block, self.pre(x), use_reentrant=self.reentrant))


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint_recompute_leaves_buffers_alone(reentrant: bool) -> None:
    torch.manual_seed(0)
    model = CheckpointedBN(reentrant).train()
    before = model_state(model)
    reports = several_runs(GradExplorer(model, torch.randn(5, 4)), 2)
    assert_unchanged(model, before)
    assert reports[0].param_status["block.0.weight"] == "healthy"


class Dropping(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.drop = nn.Dropout(0.5)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(self.drop(torch.relu(self.fc1(x))))


def test_dropout_runs_are_reproducible_and_rng_untouched() -> None:
    torch.manual_seed(0)
    model = Dropping().train()
    x = torch.randn(16, 8)
    rng = torch.get_rng_state()
    ex = GradExplorer(model, x)
    first, second, third = several_runs(ex)
    assert first.param_norms == second.param_norms == third.param_norms
    assert first.loss == second.loss
    assert torch.equal(torch.get_rng_state(), rng)
    # dropout is really active (a different seed gives a different mask) ...
    other = GradExplorer(model, x, seed=1).run()
    assert other.param_norms["fc1.weight"] != first.param_norms["fc1.weight"]
    # ... and the user's next random draw is what it would have been without the explorer
    after_runs = torch.randn(3)
    torch.set_rng_state(rng)
    assert torch.equal(after_runs, torch.randn(3))


#: weak references to KeepsOutput's activations (outside the module: a run copies the plain
#: lists a module holds, run/attr_views.py)
OUTPUT_REFS: list[weakref.ref] = []


class KeepsOutput(nn.Module):
    """Records a weak reference to its output activation on every call."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        y = torch.relu(self.fc(x))
        OUTPUT_REFS.append(weakref.ref(y))
        return y


def test_no_activation_outlives_the_run() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(KeepsOutput(), nn.Linear(6, 2))
    ex = GradExplorer(model, torch.randn(4, 6))
    OUTPUT_REFS.clear()
    report = ex.run()
    _ = ex.graph, ex.report, ex.history
    gc.collect()
    refs = OUTPUT_REFS
    assert len(refs) == 1
    assert refs[0]() is None, "an activation is still referenced after the run"
    assert report.param_status["0.fc.weight"] == "healthy"


def test_model_is_collectable_after_del_explorer() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(KeepsOutput(), nn.Linear(6, 2))
    ex = GradExplorer(model, torch.randn(4, 6))
    ex.toggle_hook("1")
    report = ex.run()
    graph = ex.graph  # results may outlive the explorer without keeping the model alive
    model_ref = weakref.ref(model)
    param_ref = weakref.ref(model[1].weight)
    del model, ex
    gc.collect()
    assert model_ref() is None
    assert param_ref() is None
    assert report.param_status["1.weight"] == "healthy" and "param:1.weight" in graph


def test_closed_explorer_releases_the_model() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3))
    ex = GradExplorer(model, torch.randn(2, 3))
    ex.run()
    model_ref = weakref.ref(model)
    del model
    gc.collect()
    assert model_ref() is not None  # an open explorer keeps its model
    ex.close()
    gc.collect()
    assert model_ref() is None


def test_plain_tensor_attribute_requiring_grad_is_not_touched() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)
            self.scale = torch.full((3,), 2.0, requires_grad=True)  # not a Parameter

        def forward(self, x):
            return self.fc(x) * self.scale

    model = Scaled()
    before = model_state(model)
    ex = GradExplorer(model, torch.randn(2, 3))
    ex.run()
    assert model.scale.grad is None
    assert_unchanged(model, before)
    leaf = [n for n in ex.graph.nodes if n.kind == "tensor"]
    assert len(leaf) == 1 and leaf[0].shape == (3,) and leaf[0].grad_norm > 0
