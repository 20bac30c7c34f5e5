"""Shared by the hook tests: what a user computes by hand (plain forward hooks on a deepcopy,
autograd.grad) and the checks of TensorStats against a tensor."""

from __future__ import annotations

import copy

import pytest
import torch
from small_models import CE
from torch import nn
from torch.utils._pytree import tree_map

from gradviz_widgets import HookEvent


def manual(model: nn.Module, x, paths, loss_fn=CE, target=None, clone_output=(), outside=()):
    """On a deepcopy: the loss, and the inputs and outputs of the modules at `paths` (plain
    forward hooks). `clone_output` paths hand a clone on to the rest of the model, so an in-place
    op after them does not change the saved output. `outside` paths save the clones they hand on
    instead, so d loss / d output is only the gradient from outside the module (what a full
    backward hook reports), not also from the module's own use of an output."""
    net = copy.deepcopy(model)
    modules = dict(net.named_modules())
    seen: dict[str, dict] = {p: {"inputs": [], "outputs": []} for p in paths}

    def fwd(path):
        def hook(module, args, output):
            seen[path]["inputs"].append(args)
            if path in outside:
                output = tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, output)
            seen[path]["outputs"].append(output)
            if path in clone_output or path in outside:
                return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, output)

        return hook

    handles = [modules[p].register_forward_hook(fwd(p)) for p in paths]
    out = net(*x) if isinstance(x, tuple) else net(x)
    loss = loss_fn(out, target) if target is not None else loss_fn(out)
    for h in handles:
        h.remove()
    return net, loss, seen


def grad_of(loss, tensors):
    return torch.autograd.grad(loss, tensors, retain_graph=True, allow_unused=True)


def assert_stats(stats, t: torch.Tensor, rel: float = 1e-5) -> None:
    """TensorStats `stats` describe tensor `t`."""
    assert stats is not None
    assert stats.shape == tuple(t.shape)
    assert stats.dtype == str(t.dtype).replace("torch.", "")
    d = t.detach().double()
    assert stats.norm == pytest.approx(d.norm().item(), rel=rel, abs=1e-12)
    assert stats.min == pytest.approx(d.min().item(), rel=rel, abs=1e-12)
    assert stats.max == pytest.approx(d.max().item(), rel=rel, abs=1e-12)
    assert stats.mean == pytest.approx(d.mean().item(), rel=rel, abs=1e-9)
    assert stats.nan == 0 and stats.inf == 0
    assert sum(stats.histogram) == t.numel()


def only(events: list[HookEvent], target: str, kind: str) -> list[HookEvent]:
    return [e for e in events if e.target == target and e.kind == kind]
