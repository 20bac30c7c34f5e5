"""Inputs at the edges: models that cannot be explored, odd losses and outputs, grad mode, bad
arguments. Each must give a correct report or a GradExplorerError that says what to do — never a
raw exception or a wrong number — and leave the model as it was."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from gradviz_widgets import GradExplorer, Thresholds
from gradviz_widgets.errors import GradExplorerError

from .models import Case, ce
from .reference import reference
from .state import diff, snapshot

X, Y = torch.randn(2, 4, generator=torch.Generator().manual_seed(0)), torch.tensor([0, 1])


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2))


def explore(model, sample=X, **kw):
    """Run once; the model must be bitwise the same afterwards whatever happens."""
    before = snapshot(model)
    try:
        return GradExplorer(model, sample, **kw).run()
    finally:
        assert diff(before, snapshot(model)) == []


def assert_matches_reference(report, c: Case) -> None:
    ref, ref_loss = reference(c)
    assert list(report.param_norms) == list(ref)
    for name, r in ref.items():
        got = report.param_norms[name]
        assert (got is None) == (r is None), (name, got, r)
        if r is not None:
            assert math.isclose(got, r[0], rel_tol=1e-5, abs_tol=1e-12), (name, got, r[0])
        else:
            assert report.none_reasons.get(name), name
    assert math.isclose(report.loss, ref_loss, rel_tol=1e-6, abs_tol=1e-7)


def test_meta_device_model_is_refused() -> None:
    with pytest.raises(GradExplorerError, match="meta"):
        explore(nn.Linear(4, 2, device="meta"))


def test_uninitialised_lazy_module_is_refused_and_stays_lazy() -> None:
    model = nn.Sequential(nn.LazyLinear(2))
    with pytest.raises(GradExplorerError, match="(?i)lazy"):
        explore(model)
    assert model[0].has_uninitialized_params()


def test_leaf_loss_is_refused_or_gives_no_gradients() -> None:
    leaf = torch.tensor(1.0, requires_grad=True)
    try:
        report = explore(mlp(), loss_fn=lambda out: leaf)
    except GradExplorerError:
        return
    assert set(report.param_status.values()) == {"none"}
    assert set(report.none_reasons) == set(report.param_status)
    assert leaf.grad is None


def test_complex_loss_is_refused_with_a_clear_message() -> None:
    with pytest.raises(GradExplorerError, match="(?i)complex"):
        explore(mlp(), loss_fn=lambda out: out.sum() * (1 + 1j))


class MixedOutputs(nn.Module):
    """An fp16 head first, then a large fp32 output whose sum overflows float16 (> 65504)."""

    def __init__(self) -> None:
        super().__init__()
        self.small = nn.Linear(4, 4).half()
        self.big = nn.Linear(4, 4096)
        with torch.no_grad():
            self.big.bias.fill_(100.0)

    def forward(self, x):
        return {"small": self.small(x.half()), "big": self.big(x)}


def test_default_loss_over_mixed_dtype_outputs_stays_finite() -> None:
    torch.manual_seed(0)
    model = MixedOutputs()
    report = explore(model)
    with torch.no_grad():
        out = model(X)
        expected = sum(t.double().sum().item() for t in out.values())
    assert math.isfinite(report.loss), report.loss
    assert math.isclose(report.loss, expected, rel_tol=1e-3), (report.loss, expected)
    assert report.nonfinite_origin is None
    assert not [f for f in report.findings if "inf" in f.lower() or "finite" in f.lower()], (
        report.findings
    )


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode], ids=lambda m: m.__name__)
def test_run_inside_no_grad_still_computes_gradients(mode) -> None:
    model = mlp()
    with mode():
        try:
            report = explore(model, loss_fn=ce, target=Y)
        except GradExplorerError as e:
            assert "no_grad" in str(e) or "grad mode" in str(e).lower()
            return
        assert not torch.is_grad_enabled(), "the explorer left grad mode switched on"
        assert torch.is_inference_mode_enabled() == (mode is torch.inference_mode)
    assert_matches_reference(report, Case(model, X, ce, Y))


def test_target_without_loss_fn_is_refused() -> None:
    with pytest.raises(GradExplorerError, match="loss_fn"):
        explore(mlp(), target=Y)


class ReentrantOnInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block, self.out = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.out(checkpoint(self.block, x, use_reentrant=True))


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")
def test_reentrant_checkpoint_on_an_input_without_grad() -> None:
    torch.manual_seed(0)
    model = ReentrantOnInput()
    try:
        report = explore(model, loss_fn=ce, target=Y)
    except GradExplorerError as e:
        assert "use_reentrant=False" in str(e)
        return
    assert_matches_reference(report, Case(model, X, ce, Y))
    assert "use_reentrant=False" in report.none_reasons["block.weight"]


class ReentrantBesideNoGrad(ReentrantOnInput):
    def __init__(self) -> None:
        super().__init__()
        self.frozen_path = nn.Linear(4, 2)

    def forward(self, x):
        with torch.no_grad():
            side = self.frozen_path(x)  # a plain no_grad block, no checkpoint around it
        return super().forward(x) + side


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")
def test_a_no_grad_block_beside_a_cut_off_checkpoint_is_told_as_no_grad() -> None:
    """An outside tester: with a reentrant checkpoint cut off anywhere in the forward, every
    module that ran without grad was said to have run inside it ("use_reentrant=False")."""
    torch.manual_seed(0)
    report = explore(ReentrantBesideNoGrad(), loss_fn=ce, target=Y)
    assert "use_reentrant=False" in report.none_reasons["block.weight"]
    said = report.none_reasons["frozen_path.weight"]
    assert "ran under torch.no_grad()" in said and "checkpoint" not in said


BAD_ARGS = [
    ("thresholds", {"thresholds": "abc"}),
    ("thresholds", {"thresholds": 1e-3}),
    ("thresholds", {"thresholds": {"vanishing": 1e-7, "exploding": 1e4}}),
    ("seed", {"seed": 1.5}),
    ("seed", {"seed": "0"}),
    ("seed", {"seed": float("nan")}),
    ("seed", {"seed": 2**70}),
    ("seed", {"seed": -(2**70)}),
]


@pytest.mark.parametrize(("argument", "kwargs"), BAD_ARGS, ids=[repr(k) for _, k in BAD_ARGS])
def test_bad_arguments_name_themselves(argument: str, kwargs: dict) -> None:
    with pytest.raises(GradExplorerError, match=argument):
        explore(mlp(), **kwargs)


BAD_MODIFIERS = [
    {"scale": float("nan")},
    {"scale": -1.0},
    {"scale": float("inf")},
    {"clip_norm": float("nan")},
    {"clip_norm": -1.0},
    {"clip_value": float("nan")},
]


@pytest.mark.parametrize("kwargs", BAD_MODIFIERS, ids=repr)
def test_bad_modifier_values_name_themselves(kwargs: dict) -> None:
    model = mlp()
    before = snapshot(model)
    ex = GradExplorer(model, X, loss_fn=ce, target=Y)
    with pytest.raises(GradExplorerError, match=next(iter(kwargs))):
        ex.set_modifier("2", **kwargs)
        ex.run()
    assert diff(before, snapshot(model)) == []


def test_good_thresholds_and_seed_are_accepted() -> None:
    report = explore(
        mlp(),
        loss_fn=ce,
        target=Y,
        seed=2**63 - 1,
        thresholds=Thresholds(vanishing=1e-6, exploding=1e3),
    )
    assert report.thresholds == Thresholds(vanishing=1e-6, exploding=1e3)


class NaNParam(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)
        self.bad = nn.Parameter(torch.zeros(2))

    def forward(self, x):
        return self.b(self.a(x)) + torch.sqrt(self.bad * 0).sum()  # d sqrt(0) -> inf * 0 = NaN


def test_nan_in_both_runs_is_not_marked_modified() -> None:
    torch.manual_seed(0)
    model = NaNParam()
    ex = GradExplorer(model, X, loss_fn=ce, target=Y)
    ex.set_modifier("b", scale=2.0)
    report = ex.run()
    bad = report.param("bad")
    assert bad.status == "nonfinite" and math.isnan(bad.norm)
    assert bad.modified_by is None, bad
    assert report.param("a.weight").modified_by is not None  # upstream of the scaled module
    assert report.param("b.weight").modified_by is None  # a module's own params: not rewritten
    ex.close()


def test_input_gradients_match_plain_backward() -> None:
    """A sample tensor that requires grad gets its gradient norm (saliency) in input_norms; the
    user's tensor keeps .grad None."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)
    )
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    report = explore(model, x, loss_fn=ce, target=Y)
    xr = x.detach().clone().requires_grad_(True)
    ce(copy.deepcopy(model)(xr), Y).backward()
    assert math.isclose(report.input_norms["0"], xr.grad.double().norm().item(), rel_tol=1e-5)
    assert x.grad is None


def test_keyword_input_gradients_on_a_transformers_model() -> None:
    from .models_hf import _gpt2, lm_loss

    c = _gpt2(True)
    c.model.eval()
    embeds = torch.randn(2, 8, 32, requires_grad=True)
    target = c.target
    report = explore(c.model, {"inputs_embeds": embeds}, loss_fn=lm_loss, target=target)
    er = embeds.detach().clone().requires_grad_(True)
    lm_loss(copy.deepcopy(c.model)(inputs_embeds=er), target).backward()
    assert math.isclose(
        report.input_norms["inputs_embeds"], er.grad.double().norm().item(), rel_tol=1e-5
    )
    assert report.param_status["transformer.wte.weight"] != "none"  # tied lm_head still counts
    assert embeds.grad is None


class FailsAfterBatchNorm(nn.Module):
    def __init__(self, where: str) -> None:
        super().__init__()
        self.where = where
        self.bn, self.lin, self.out = nn.BatchNorm1d(4), nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        h = torch.sigmoid(self.lin(self.bn(x)))  # BN statistics are updated before it fails
        if self.where == "forward":
            raise ValueError("boom")
        if self.where == "backward":
            h.mul_(2)  # sigmoid saved its output: backward raises
        return self.out(h)


def _raising_loss(out, target):
    raise KeyError("no such key")


@pytest.mark.parametrize("where", ["forward", "backward", "loss"])
def test_a_failing_run_leaves_the_model_untouched(where: str) -> None:
    """With hooks on, a failure in forward, backward or loss_fn is a GradExplorerError and
    every hook, buffer and RNG state is as before (explore() checks the snapshot)."""
    torch.manual_seed(0)
    model = FailsAfterBatchNorm(where).train()
    before = snapshot(model)
    ex = GradExplorer(model, X, loss_fn=_raising_loss if where == "loss" else ce, target=Y)
    ex.set_hook("bn", "backward")
    ex.set_hook("out", "forward")
    with pytest.raises(GradExplorerError):
        ex.run()
    assert diff(before, snapshot(model)) == []
    ex.close()
    assert diff(before, snapshot(model)) == []
