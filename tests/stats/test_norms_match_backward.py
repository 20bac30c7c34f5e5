"""Every norm the explorer reports equals the one plain `loss.backward()` gives on a deep copy."""

from __future__ import annotations

import copy
import dataclasses
import math

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from torch.utils._pytree import tree_map

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import UnrolledLSTM, bert_like, gpt2_like, lstm_model, resnet18

RTOL = 1e-5


def _call(model, sample):
    if isinstance(sample, dict):
        return model(**sample)
    if isinstance(sample, (tuple, list)):
        return model(*sample)
    return model(sample)


def reference(model, sample, loss_fn=None, target=None, default_loss=None):
    """(norms, loss) from the textbook recipe on a deep copy of the model."""
    twin = copy.deepcopy(model)
    sample = tree_map(
        lambda t: (
            t.detach().clone().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else t
        ),
        sample,
    )
    out = _call(twin, sample)
    if loss_fn is not None:
        loss = loss_fn(out, target) if target is not None else loss_fn(out)
    else:
        loss = default_loss(out) if default_loss else out.sum()
    loss.backward()
    norms = {
        n: None if p.grad is None else p.grad.double().norm().item()
        for n, p in twin.named_parameters()
    }
    return norms, loss.item()


def assert_same_norms(report, ref) -> None:
    ours = report.param_norms
    assert list(ours) == list(ref)
    for name, expected in ref.items():
        got = ours[name]
        if expected is None:
            assert got is None, name
            assert report.param_status[name] == "none", name
        else:
            assert got is not None, name
            assert math.isclose(got, expected, rel_tol=RTOL, abs_tol=1e-12), (name, got, expected)


def check(model, sample, **kw):
    ref, ref_loss = reference(
        model, sample, kw.get("loss_fn"), kw.get("target"), kw.pop("default_loss", None)
    )
    report = GradExplorer(model, sample, **kw).run()
    assert_same_norms(report, ref)
    assert math.isclose(report.loss, ref_loss, rel_tol=1e-6, abs_tol=1e-7)
    return report


def test_resnet_batchnorm_inplace_relu_train_mode() -> None:
    torch.manual_seed(0)
    model = resnet18(num_classes=5, width=4).train()
    x = torch.randn(2, 3, 32, 32)
    y = torch.tensor([1, 3])
    report = check(model, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    assert set(report.param_status.values()) <= {"healthy", "vanishing"}


def test_bert_like_encoder() -> None:
    torch.manual_seed(0)
    model = bert_like(n_layer=2, d_model=16, n_head=2, vocab=64, seq=16)
    idx = torch.randint(0, 64, (2, 8))
    check(model, idx, loss_fn=nn.CrossEntropyLoss(), target=torch.tensor([0, 1]))


def test_bert_like_encoder_eval_mode() -> None:
    torch.manual_seed(1)
    model = bert_like(n_layer=1, d_model=16, n_head=2, vocab=64, seq=16).eval()
    check(model, torch.randint(0, 64, (2, 8)))


def test_gpt2_like_weight_tying() -> None:
    torch.manual_seed(0)
    model = gpt2_like(n_layer=2, d_model=16, n_head=2, vocab=64, seq=16)
    idx = torch.randint(0, 64, (2, 8))
    target = torch.randint(0, 64, (2, 8))

    def lm_loss(logits, tgt):
        return nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))

    report = check(model, idx, loss_fn=lm_loss, target=target)
    # the tied matrix is one parameter: its norm holds the embedding and the lm_head gradient
    assert "lm_head.weight" not in report.param_norms
    assert "wte.weight" in report.param_norms
    assert model.lm_head.weight is model.wte.weight


def test_nn_lstm() -> None:
    torch.manual_seed(0)
    model = lstm_model(input_size=4, hidden=8, num_layers=2, num_classes=3)
    check(
        model, torch.randn(3, 5, 4), loss_fn=nn.CrossEntropyLoss(), target=torch.tensor([0, 1, 2])
    )


def test_unrolled_lstm() -> None:
    torch.manual_seed(0)
    model = UnrolledLSTM(4, 8, steps=6, num_classes=3)
    check(
        model, torch.randn(3, 6, 4), loss_fn=nn.CrossEntropyLoss(), target=torch.tensor([2, 0, 1])
    )


# ---- random MLP / conv nets ----------------------------------------------------------------

ACTIVATIONS = {
    "relu": nn.ReLU,
    "relu_inplace": lambda: nn.ReLU(inplace=True),
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "gelu": nn.GELU,
    "leaky": lambda: nn.LeakyReLU(0.1),
    "none": nn.Identity,
}


@st.composite
def nets(draw):
    conv = draw(st.booleans())
    depth = draw(st.integers(1, 4))
    widths = draw(st.lists(st.integers(1, 6), min_size=depth, max_size=depth))
    acts = draw(st.lists(st.sampled_from(sorted(ACTIVATIONS)), min_size=depth, max_size=depth))
    biases = draw(st.lists(st.booleans(), min_size=depth + 1, max_size=depth + 1))
    frozen = draw(st.lists(st.booleans(), min_size=depth + 1, max_size=depth + 1))
    if all(frozen):
        frozen[draw(st.integers(0, depth))] = False
    seed = draw(st.integers(0, 2**16))
    batch = draw(st.integers(1, 3))
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    f = draw(st.integers(1, 4))
    in_f = f
    for w, act, bias in zip(widths, acts, biases):
        layers.append(
            nn.Conv2d(f, w, 3, padding=1, bias=bias) if conv else nn.Linear(f, w, bias=bias)
        )
        layers.append(ACTIVATIONS[act]())
        f = w
    if conv:
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    layers.append(nn.Linear(f, 3, bias=biases[-1]))
    model = nn.Sequential(*layers)
    trainable = [m for m in model if isinstance(m, (nn.Linear, nn.Conv2d))]
    for m, fz in zip(trainable, frozen):
        m.requires_grad_(not fz)
    x = torch.randn(batch, in_f, 5, 5) if conv else torch.randn(batch, in_f)
    return model, x


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nets())
def test_random_nets_match_backward(net_and_input) -> None:
    model, x = net_and_input
    report = check(model, x)
    for name, p in model.named_parameters():
        if not p.requires_grad:
            assert report.param_status[name] == "none"
            assert report.none_reasons[name].startswith("requires_grad=False")


# ---- input and output structures -------------------------------------------------------------


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 5)
        self.b = nn.Linear(3, 5)
        self.out = nn.Linear(5, 2)

    def forward(self, x, z, scale=1.0):
        return self.out(torch.tanh(self.a(x) + self.b(z) * scale))


def test_sample_input_tuple_is_positional() -> None:
    torch.manual_seed(0)
    model = TwoInputs()
    x = torch.randn(3, 4, requires_grad=True)
    z = torch.randn(3, 3)
    report = check(model, (x, z))
    # the input gradient is reported too, and the user's tensor keeps no .grad
    twin = copy.deepcopy(model)
    x2 = x.detach().clone().requires_grad_(True)
    twin(x2, z).sum().backward()
    assert math.isclose(report.input_norms["0"], x2.grad.double().norm().item(), rel_tol=RTOL)
    assert x.grad is None


def test_sample_input_dict_is_keywords() -> None:
    torch.manual_seed(0)
    model = TwoInputs()
    sample = {"x": torch.randn(3, 4), "z": torch.randn(3, 3), "scale": 0.5}
    check(model, sample)
    # scale really reached forward: a different scale gives different norms
    other = GradExplorer(model, {**sample, "scale": 2.0}).run()
    assert (
        other.param_norms["b.weight"] != GradExplorer(model, sample).run().param_norms["b.weight"]
    )


class TupleOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 6)
        self.head = nn.Linear(6, 3)
        self.aux = nn.Linear(6, 2)

    def forward(self, x):
        h = torch.relu(self.body(x))
        logits = self.head(h)
        return logits, logits.argmax(-1), self.aux(h)


class DictOut(TupleOut):
    def forward(self, x):
        logits, idx, aux = super().forward(x)
        return {"logits": logits, "pred": idx, "aux": aux, "note": "not a tensor"}


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    aux: torch.Tensor
    steps: int


class DataclassOut(TupleOut):
    def forward(self, x):
        logits, _, aux = super().forward(x)
        return Output(logits, aux.detach(), 3)  # aux detached: not part of the default loss


def test_tuple_output_default_loss_sums_float_outputs() -> None:
    torch.manual_seed(0)
    model = TupleOut()
    report = check(model, torch.randn(4, 4), default_loss=lambda o: o[0].sum() + o[2].sum())
    assert report.loss_description == "sum of output[0] + sum of output[2]"


def test_dict_output_default_loss_sums_float_outputs() -> None:
    torch.manual_seed(0)
    model = DictOut()
    report = check(
        model, torch.randn(4, 4), default_loss=lambda o: o["logits"].sum() + o["aux"].sum()
    )
    assert "output.logits" in report.loss_description and "output.aux" in report.loss_description
    assert "pred" not in report.loss_description


def test_dataclass_output_default_loss() -> None:
    torch.manual_seed(0)
    model = DataclassOut()
    report = check(model, torch.randn(4, 4), default_loss=lambda o: o.logits.sum())
    assert report.loss_description == "sum of output.logits"
    assert report.param_status["aux.weight"] == "none"


def test_dict_output_with_loss_fn() -> None:
    torch.manual_seed(0)
    model = DictOut()
    y = torch.tensor([0, 2, 1, 1])

    def loss_fn(out, target):
        return nn.functional.cross_entropy(out["logits"], target) + out["aux"].pow(2).mean()

    check(model, torch.randn(4, 4), loss_fn=loss_fn, target=y)


def test_scalar_output_is_the_loss() -> None:
    torch.manual_seed(0)

    class Scalar(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 1)

        def forward(self, x):
            return self.fc(x).pow(2).mean()

    model = Scalar()
    report = check(model, torch.randn(5, 3), default_loss=lambda o: o)
    assert report.loss_description == "the model's scalar output"


def test_float64_model() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    report = check(model, torch.randn(2, 3, dtype=torch.float64))
    assert {p.dtype for p in report.params} == {"float64"}


def test_loss_fn_reading_model_parameters() -> None:
    """A regulariser in loss_fn (weight decay) adds to the parameter gradients."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    x, y = torch.randn(5, 3), torch.tensor([0, 1, 1, 0, 1])

    def regularised(on):
        def loss_fn(out, target):
            decay = sum(p.pow(2).sum() for p in on.parameters())
            return nn.functional.cross_entropy(out, target) + 0.1 * decay

        return loss_fn

    twin = copy.deepcopy(model)
    regularised(twin)(twin(x), y).backward()
    report = GradExplorer(model, x, loss_fn=regularised(model), target=y).run()
    assert_same_norms(
        report, {n: p.grad.double().norm().item() for n, p in twin.named_parameters()}
    )
    assert all(p.grad is None for p in model.parameters())
