"""The in-place fallback is decided from a typed signal: `inplace_clash` reads torch's error text
in one place. These trigger torch's real errors, so a change of wording fails here first."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorerError
from gradviz_widgets.hooks.clash import (
    TORCH_CLASH_TEXT,
    HookFacts,
    InplaceClash,
    Unhookable,
    inplace_clash,
)


def _torch_error(write) -> RuntimeError:
    """The error torch raises when `write(output)` modifies a full-backward-hooked output."""
    torch.manual_seed(0)
    module = nn.Linear(3, 3)
    module.register_full_backward_hook(lambda *args: None)
    x = torch.randn(2, 3, requires_grad=True)
    with pytest.raises(RuntimeError) as info:
        write(module(x))
    return info.value


@pytest.mark.parametrize(
    "write",
    [lambda y: y.relu_(), lambda y: y[:, 0].mul_(2), lambda y: torch.relu_(y.view(-1))],
    ids=["output", "view-of-output", "view-then-relu_"],
)
def test_torch_inplace_errors_are_clashes(write) -> None:
    error = _torch_error(write)
    assert any(words in str(error) for words in TORCH_CLASH_TEXT), (
        f"torch's wording changed; update TORCH_CLASH_TEXT: {error}"
    )
    assert inplace_clash(error) == InplaceClash()
    # as the explorer sees it: torch's error raised from the model's forward, wrapped
    try:
        raise GradExplorerError(f"The model raised RuntimeError during forward: {error}") from error
    except GradExplorerError as wrapped:
        assert inplace_clash(wrapped) == InplaceClash()


def test_other_errors_are_not_clashes() -> None:
    x = torch.randn(3, requires_grad=True)
    a = x.sigmoid()
    a.mul_(2)  # modifies what sigmoid saved for backward: the model's own bug
    with pytest.raises(RuntimeError) as info:
        a.sum().backward()
    assert "modified by an inplace operation" in str(info.value)
    assert inplace_clash(info.value) is None
    # our own message quoting torch's words is not torch's error
    assert inplace_clash(GradExplorerError("... BackwardHookFunction ...")) is None
    assert inplace_clash(ValueError("created inside a custom Function")) is None


def test_unhookable_carries_its_clash() -> None:
    clash = InplaceClash("the module returns a dict", "d")
    assert inplace_clash(Unhookable("'d' returns a dict", clash)) is clash


def test_facts_fall_back_every_backward_hook_once() -> None:
    facts = HookFacts().with_fallback("a", "the module has a non-full backward hook")
    assert facts.can_fall_back(["a", "b"]) and not facts.can_fall_back(["a"])
    after = facts.falling_back(["a", "b"], InplaceClash("the module returns a dict", "b"))
    assert dict(after.fallback) == {
        "a": "the module has a non-full backward hook",
        "b": "the module returns a dict",
    }
    assert not after.can_fall_back(["a", "b"])
    assert dict(facts.fallback) == {"a": "the module has a non-full backward hook"}  # unchanged
