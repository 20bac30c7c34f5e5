"""Every user mistake is one GradExplorerError saying what happened and what to do."""

from __future__ import annotations

import pytest
import torch
from model_state import assert_unchanged, model_state
from torch import nn

from gradviz_widgets import GradExplorer, GradExplorerError
from gradviz_widgets.examples import mlp3


class Raises(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.bn = nn.BatchNorm1d(3)

    def forward(self, x):
        self.bn(self.fc(x))  # updates running stats: a failed run must not leave them
        raise ValueError("forward exploded on purpose")


class Detached(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x).detach()


class IntegerOutput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x).argmax(-1)


def _model(kind: str) -> nn.Module:
    torch.manual_seed(0)
    if kind == "raises":
        return Raises()
    if kind == "detached":
        return Detached()
    if kind == "int_out":
        return IntegerOutput()
    model = mlp3(4, 6, 3)
    if kind == "frozen":
        model.requires_grad_(False)
    return model


# (model kind, explorer kwargs, input, phrases the message must contain: what + what to do)
CASES = {
    "wrong_input_shape": (
        "mlp",
        {},
        torch.randn(2, 5),
        ["raised RuntimeError during forward", "(2, 5)", "Check that sample_input"],
    ),
    "model_raises": (
        "raises",
        {},
        torch.randn(2, 4),
        [
            "raised ValueError during forward",
            "forward exploded on purpose",
            "model was not changed",
        ],
    ),
    "nothing_requires_grad": (
        "detached",
        {},
        torch.randn(2, 4),
        ["Nothing to differentiate", "does not require grad", "detach"],
    ),
    "all_frozen": (
        "frozen",
        {},
        torch.randn(2, 4),
        ["All 6 parameters have requires_grad=False", "requires_grad_(True)"],
    ),
    "non_scalar_loss": (
        "mlp",
        {"loss_fn": lambda out: out * 2},
        torch.randn(2, 4),
        ["shape (2, 3)", "must be a scalar", ".mean()"],
    ),
    "loss_fn_raises": (
        "mlp",
        {"loss_fn": nn.CrossEntropyLoss(), "target": torch.tensor([0.5])},
        torch.randn(2, 4),
        ["loss_fn raised", "loss_fn(output, target)"],
    ),
    "integer_output": (
        "int_out",
        {},
        torch.randn(2, 4),
        ["Nothing to differentiate", "int64", "loss_fn="],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_error_says_what_and_what_to_do(case: str) -> None:
    kind, kwargs, x, phrases = CASES[case]
    model = _model(kind)
    before = model_state(model)
    x_before = x.clone()
    rng = torch.get_rng_state()
    ex = GradExplorer(model, x, **kwargs)
    with pytest.raises(GradExplorerError) as info:
        ex.run()
    message = str(info.value)
    for phrase in phrases:
        assert phrase in message, (phrase, message)
    assert_unchanged(model, before)
    assert torch.equal(x, x_before)
    assert torch.equal(torch.get_rng_state(), rng)
    assert ex.history == []  # a failed run records nothing


@pytest.mark.parametrize(
    "device, phrase",
    [("cuda:7", "not available"), ("banana", "not a device name"), ("mps", "not available")],
)
def test_unavailable_device(device: str, phrase: str) -> None:
    if device == "mps" and "mps" in GradExplorer.available_devices():
        pytest.skip("mps exists here")
    if device == "cuda:7" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has 8 GPUs")
    model = _model("mlp")
    before = model_state(model)
    with pytest.raises(GradExplorerError) as info:
        GradExplorer(model, torch.randn(2, 4), device=device)
    message = str(info.value)
    assert phrase in message and repr(device) in message
    assert "cpu" in message  # names what is available
    # switching the device of an existing explorer fails the same way and keeps the old device
    ex = GradExplorer(model, torch.randn(2, 4))
    with pytest.raises(GradExplorerError, match="device"):
        ex.run(device=device)
    assert ex.device is None
    assert ex.run().device == "cpu"
    assert_unchanged(model, before)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA exists here")
def test_cuda_absent() -> None:
    with pytest.raises(GradExplorerError, match="'cuda' is not available.*available: cpu"):
        GradExplorer(_model("mlp"), torch.randn(2, 4), device="cuda")


def test_unknown_keyword_is_type_error() -> None:
    with pytest.raises(TypeError, match="lossfn"):
        GradExplorer(_model("mlp"), torch.randn(2, 4), lossfn=nn.MSELoss())  # type: ignore[call-arg]


def test_not_a_module() -> None:
    with pytest.raises(GradExplorerError, match="must be a torch.nn.Module"):
        GradExplorer(lambda x: x, torch.randn(2, 4))  # type: ignore[arg-type]


def test_error_is_a_runtime_error_and_explorer_still_works() -> None:
    model = _model("mlp")
    ex = GradExplorer(model, torch.randn(2, 5))
    with pytest.raises(RuntimeError):
        ex.run()
    ex.sample_input = torch.randn(2, 4)  # fix the input and run again
    assert set(ex.run().param_status.values()) == {"healthy"}


def test_a_name_with_nothing_close_gets_no_empty_suggestion() -> None:
    """`toggle_hook("nonexistent")` said "did you mean []?"; a near miss still gets names."""
    ex = GradExplorer(nn.Sequential(nn.Linear(2, 2)), torch.ones(1, 2))
    with pytest.raises(GradExplorerError) as far:
        ex.toggle_hook("zzzzzz")
    assert "[]" not in str(far.value) and "did you mean" not in str(far.value)
    ex = GradExplorer(nn.ModuleDict({"gate": nn.Linear(2, 2)}), torch.ones(1, 2))
    with pytest.raises(GradExplorerError, match=r"did you mean 'gate'\?"):
        ex.set_hook("gat")
