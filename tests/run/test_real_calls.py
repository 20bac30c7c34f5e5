"""The explorer on models as people call them (issue 19): the model's own loss, every RNG,
parameters that carry attributes, reentrant checkpoint and user tensors, gradients inside the
loss, messages at the door. Real transformers models from small configs; each number against
a plain float64 computation on a copy."""

from __future__ import annotations

import copy
import math
import random

import numpy as np
import pytest
import torch
from model_state import assert_unchanged, model_state
from small_models import HF_VOCAB, tiny_bert_config, tiny_gpt2_config
from torch import nn
from torch.utils.checkpoint import checkpoint

from gradviz_widgets import GradExplorer, Thresholds
from gradviz_widgets.errors import GradExplorerError
from gradviz_widgets.render.page import page_html
from gradviz_widgets.watch import GradWatch
from gradviz_widgets.widget.controller import loss_line_html

transformers = pytest.importorskip("transformers")
VOCAB = HF_VOCAB


def gpt2(dropout: float = 0.1) -> nn.Module:
    torch.manual_seed(0)
    cfg = tiny_gpt2_config(resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout)
    return transformers.GPT2LMHeadModel(cfg).train()


def ids(seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(seed))


def plain_norms(model: nn.Module, batch: dict, seed: int = 0) -> tuple[dict, float]:
    """`model(**batch).loss.backward()` on a deep copy, float64 norms of every .grad."""
    twin = copy.deepcopy(model)
    twin.zero_grad(set_to_none=True)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        loss = twin(**batch).loss
        loss.backward()
    norms = {
        n: None if p.grad is None else torch.linalg.vector_norm(p.grad.double()).item()
        for n, p in twin.named_parameters()
    }
    return norms, loss.item()


def assert_exact(report, norms: dict, loss: float) -> None:
    assert report.loss == pytest.approx(loss, rel=1e-6)
    for name, ref in norms.items():
        got = report.param_norms[name]
        assert (got is None) == (ref is None), name
        if ref is not None:
            assert got == pytest.approx(ref, rel=1e-5, abs=1e-12), name


# ---- 1. the model's own loss -----------------------------------------------------------------
def test_gpt2_with_labels_differentiates_output_loss_and_says_so() -> None:
    model, x = gpt2(), ids()
    batch = {"input_ids": x, "labels": x}
    before = model_state(model)
    ex = GradExplorer(model, batch)
    report = ex.run()
    assert_unchanged(model, before)
    assert_exact(report, *plain_norms(model, batch))
    assert report.loss_description == "output.loss, the model's own loss"
    (note,) = [f for f in report.notes if "no loss_fn given" in f]
    assert (
        "output.loss" in note and "this run adds nothing to it (output.logits as returned" in note
    )
    assert "an MoE model's holds its aux_loss" in note  # it may be in the loss already
    assert report.findings == ()  # how the loss was chosen is a note, not a problem
    assert report.summary().endswith(note) and "gradients healthy" in report.summary()
    line = loss_line_html(report, 10, 10, None)
    assert "output.loss, the model&#x27;s own loss" in line or "output.loss, the model" in line
    page = page_html(ex.graph, report)
    assert "output.loss" in page and "no loss_fn given" in page


def test_bert_classifier_with_labels_uses_its_loss() -> None:
    torch.manual_seed(0)
    cfg = tiny_bert_config(num_labels=3)
    model = transformers.BertForSequenceClassification(cfg).train()
    batch = {"input_ids": ids(), "labels": torch.tensor([2, 0])}
    report = GradExplorer(model, batch).run()
    assert_exact(report, *plain_norms(model, batch))
    assert "output.loss" in report.loss_description


def test_without_labels_the_sum_of_outputs_stays_and_loss_fn_wins() -> None:
    model, x = gpt2(0.0), ids()
    assert "sum of output.logits" in GradExplorer(model, {"input_ids": x}).run().loss_description
    lm = lambda out: out.logits.float().pow(2).mean()  # noqa: E731
    report = GradExplorer(model, {"input_ids": x, "labels": x}, loss_fn=lm).run()
    assert report.loss_description.startswith("<lambda>")
    assert not any("no loss_fn given" in f for f in report.notes)


class DictLoss(nn.Module):
    def __init__(self, as_attribute: bool) -> None:
        super().__init__()
        self.fc, self.as_attribute = nn.Linear(4, 3), as_attribute

    def forward(self, x, y):
        logits = self.fc(x)
        loss = nn.functional.cross_entropy(logits, y)
        if self.as_attribute:
            return type("Out", (), {"loss": loss, "logits": logits})()
        return {"logits": logits, "loss": loss}


@pytest.mark.parametrize("as_attribute", [False, True])
def test_a_loss_key_or_attribute_is_the_default_loss(as_attribute: bool) -> None:
    torch.manual_seed(0)
    model, x, y = DictLoss(as_attribute), torch.randn(5, 4), torch.tensor([0, 1, 2, 0, 1])
    report = GradExplorer(model, (x, y)).run()
    twin = copy.deepcopy(model)
    out = twin(x, y)
    (out.loss if as_attribute else out["loss"]).backward()
    assert report.param_norms["fc.weight"] == pytest.approx(
        twin.fc.weight.grad.double().norm().item(), rel=1e-6
    )


def test_gradwatch_replay_of_an_hf_step_uses_the_models_loss(tmp_path) -> None:
    model = gpt2()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    watch = GradWatch(
        model, optimizer=opt, path=tmp_path / "run", thresholds=Thresholds(1e-9, 0.05)
    )
    for step in range(2):
        x = ids(step)
        opt.zero_grad()
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
    exploding = [a for a in watch.anomalies if a.kind == "exploding"]
    assert exploding
    ex = exploding[0].explore()
    h = watch.history()
    rows = h[h.step == exploding[0].step].set_index("param")
    for name, norm in ex.report.param_norms.items():
        assert norm == pytest.approx(rows.loc[name].norm, rel=1e-6), name
    assert "output.loss" in ex.report.loss_description
    watch.close()


# ---- 2. every RNG ------------------------------------------------------------------------------
class DrawsEverywhere(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x):
        mask = torch.from_numpy(np.random.rand(*x.shape) < 0.5)
        return (self.fc(x).masked_fill(mask, 0.0) * random.random()).sum()


def test_numpy_and_python_rngs_are_seeded_and_put_back() -> None:
    torch.manual_seed(0)
    model, x = DrawsEverywhere(), torch.randn(3, 6)
    np.random.seed(123)
    random.seed(456)
    np_before, py_before = repr(np.random.get_state()), random.getstate()
    a = GradExplorer(model, x).run()
    b = GradExplorer(model, x, seed=0).run()
    other = GradExplorer(model, x, seed=1).run()
    assert a.param_norms == b.param_norms and a.loss == b.loss
    assert other.param_norms != a.param_norms
    unseeded = GradExplorer(model, x, seed=None).run()  # the user's own streams, forked
    assert repr(np.random.get_state()) == np_before and random.getstate() == py_before
    # the reference: the same seeds drawn in plain PyTorch
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    twin = copy.deepcopy(model)
    twin(x).backward()
    assert a.param_norms["fc.weight"] == pytest.approx(twin.fc.weight.grad.double().norm().item())
    # seed=None: the run draws from the user's streams where they stand, and puts them back
    assert unseeded.loss == pytest.approx(_plain_loss(model, x, 123, 456))


def _plain_loss(model, x, np_seed, py_seed) -> float:
    np_state, py_state = np.random.get_state(), random.getstate()
    np.random.seed(np_seed)
    random.seed(py_seed)
    try:
        with torch.no_grad():
            return model(x).item()
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)


# ---- 3. parameters that carry more than data --------------------------------------------------
class QuantParam(nn.Parameter):
    def fake_quant(self) -> torch.Tensor:
        return torch.round(self * self.levels) / self.levels


class QuantLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = QuantParam(torch.randn(4, 4))
        self.weight.levels = 8.0
        self.weight.lr_scale = 0.1  # an optimizer hint, read by nobody in forward

    def forward(self, x):
        w = self.weight
        return (x @ (w + (w.fake_quant() - w).detach()).T).pow(2).sum()  # straight-through


def test_parameter_subclass_keeps_class_and_attributes_and_is_exact() -> None:
    torch.manual_seed(0)
    model, x = QuantLinear(), torch.randn(3, 4)
    before = model_state(model)
    report = GradExplorer(model, x).run()
    assert_unchanged(model, before)
    assert type(model.weight) is QuantParam and model.weight.levels == 8.0
    twin = QuantLinear()
    twin.load_state_dict(model.state_dict())
    twin(x).backward()
    assert report.param_norms["weight"] == pytest.approx(twin.weight.grad.double().norm().item())


class ByIdentity(nn.Module):
    """A forward that looks the parameter up by identity in a table on the module: the run
    sees the table keyed by the stand-in (run/attr_views.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 3))
        self.w.tag = "w"
        self.scales = {id(self.w): 2.0}

    def forward(self, x):
        return (x @ self.w * self.scales[id(self.w)]).sum()


SCALES: dict[int, float] = {}  # a table the run cannot see into: outside the module


class ByIdentityOutside(ByIdentity):
    def forward(self, x):
        return (x @ self.w * SCALES[id(self.w)]).sum()


def test_a_forward_that_needs_the_parameter_object_says_exactly_that() -> None:
    torch.manual_seed(0)
    model, x = ByIdentity(), torch.randn(2, 3)
    report = GradExplorer(model, x).run()
    (grad,) = torch.autograd.grad(model(x), [model.w])
    assert report.param_norms["w"] == pytest.approx(grad.double().norm().item(), rel=1e-12)
    outside = ByIdentityOutside()
    SCALES[id(outside.w)] = 2.0
    with pytest.raises(GradExplorerError) as e:
        GradExplorer(outside, x).run()
    assert "parameter 'w' (its id())" in str(e.value) and "stand-in" in str(e.value)


# ---- 4. reentrant checkpoint: no .grad of any user tensor --------------------------------------
def test_reentrant_checkpoint_writes_no_grad_of_tensors_that_are_not_parameters() -> None:
    outside = torch.ones(4, requires_grad=True)  # held by a closure

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.attr = torch.full((4,), 0.5, requires_grad=True)

        def forward(self, x):
            f = lambda t: torch.tanh(self.fc(t)) * self.attr * outside  # noqa: E731
            return checkpoint(f, x, use_reentrant=True).sum()

    torch.manual_seed(0)
    model, x = Net(), torch.randn(2, 4, requires_grad=True)
    report = GradExplorer(model, x).run()
    assert model.attr.grad is None and outside.grad is None and x.grad is None
    twin = copy.deepcopy(model)
    twin(x.detach().requires_grad_()).backward()
    assert report.param_norms["fc.weight"] == pytest.approx(
        twin.fc.weight.grad.double().norm().item()
    )


# ---- 5. gradients inside the loss --------------------------------------------------------------
def critic() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def test_wgan_gp_penalty_over_the_users_input_matches_plain_pytorch() -> None:
    model, x = critic(), torch.randn(5, 4, requires_grad=True)

    def loss_fn(out, m=model):
        (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        return -out.mean() + 10 * ((g.norm(2, dim=1) - 1) ** 2).mean()

    report = GradExplorer(model, x, loss_fn=loss_fn).run()
    assert x.grad is None
    twin = copy.deepcopy(model)
    out = twin(x)
    (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    (-out.mean() + 10 * ((g.norm(2, dim=1) - 1) ** 2).mean()).backward()
    for name, p in twin.named_parameters():
        assert report.param_norms[name] == pytest.approx(p.grad.double().norm().item()), name


def test_grad_calls_keep_torchs_rules_for_unused_tensors_and_backward_is_refused() -> None:
    model, x = critic(), torch.randn(5, 4)
    params = list(model.parameters())
    extra = nn.Parameter(torch.ones(2))
    with pytest.raises(GradExplorerError, match="appears to not have been used"):
        GradExplorer(
            model, x, loss_fn=lambda o: torch.autograd.grad(o.sum(), [params[0], extra])[0].sum()
        ).run()

    def allowed(o):
        g = torch.autograd.grad(o.sum(), [*params, extra], allow_unused=True, create_graph=True)
        assert g[-1] is None
        return o.mean() + g[0].pow(2).sum()

    GradExplorer(model, x, loss_fn=allowed).run()

    def backward_inside(o):
        o.sum().backward()
        return o.mean()

    with pytest.raises(GradExplorerError, match="torch.autograd.grad"):
        GradExplorer(model, x, loss_fn=backward_inside).run()
    assert all(p.grad is None for p in params)


# ---- 6. messages at the door -------------------------------------------------------------------
def test_a_loss_class_instead_of_an_instance_says_to_pass_an_instance() -> None:
    with pytest.raises(GradExplorerError, match=r"loss_fn=CrossEntropyLoss\(\)"):
        GradExplorer(critic(), torch.randn(2, 4), loss_fn=nn.CrossEntropyLoss)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"vanishing": 1.0, "exploding": 0.5},
        {"vanishing": -1.0},
        {"exploding": math.nan},
        {"vanishing": "small"},
        {"exploding": True},
    ],
)
def test_bad_thresholds_raise_gradexplorererror(kwargs) -> None:
    with pytest.raises(GradExplorerError, match="(?i)thresholds"):
        Thresholds(**kwargs)


class LoggedLoss(nn.Module):
    """Keeps a detached loss for logging next to its logits: no loss to differentiate."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        logits = self.fc(x)
        return {"logits": logits, "loss": logits.detach().pow(2).mean()}


def test_a_detached_loss_in_the_output_is_not_the_loss() -> None:
    report = GradExplorer(LoggedLoss(), torch.randn(2, 4)).run()
    assert report.loss_description == "sum of output.logits"
    assert not any("no loss_fn given" in f for f in report.notes)
