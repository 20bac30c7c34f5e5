"""The backward graph through checkpointing, custom autograd Functions and very deep chains."""

from __future__ import annotations

import copy
import math
import sys
from collections import Counter

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from gradviz_widgets import GradExplorer

CE = nn.CrossEntropyLoss()


# ---- checkpoint and custom autograd Functions -------------------------------------------------


class Checkpointed(nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.pre = nn.Linear(4, 6)
        self.block = nn.Sequential(nn.Linear(6, 6), nn.Tanh(), nn.Linear(6, 6))
        self.head = nn.Linear(6, 2)
        self.reentrant = reentrant

    def forward(self, x):
        return self.head(checkpoint(self.block, self.pre(x), use_reentrant=self.reentrant))


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class CustomFn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 6)
        self.b = nn.Linear(6, 2)

    def forward(self, x):
        return self.b(Square.apply(self.a(x)))


def _ref_norms(model, x):
    twin = copy.deepcopy(model)
    twin(x).sum().backward()
    return {n: p.grad.double().norm().item() for n, p in twin.named_parameters()}


def _assert_norms(report, ref):
    assert set(report.param_norms) == set(ref)
    for k, v in ref.items():
        assert math.isclose(report.param_norms[k], v, rel_tol=1e-5), k


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint(reentrant: bool) -> None:
    torch.manual_seed(0)
    model = Checkpointed(reentrant)
    x = torch.randn(3, 4)
    ex = GradExplorer(model, x)
    report = ex.run()
    _assert_norms(report, _ref_norms(model, x))
    assert set(report.param_status.values()) == {"healthy"}
    g = ex.graph
    if reentrant:
        # one opaque node for the checkpointed call, made by the root's forward
        node = g.node("CheckpointFunctionBackward#0")
        assert node.module == "" and node.grad_norm is not None
        assert not any(n.module.startswith("block") for n in g.nodes)
    else:
        assert g.node("block.0/AddmmBackward0#0").module == "block.0"
        assert g.node("block.1/TanhBackward0#0").module == "block.1"
    ex.run()  # runs again (the recompute leaves nothing behind)
    assert report.param_norms == ex.report.param_norms


def test_custom_autograd_function() -> None:
    torch.manual_seed(0)
    model = CustomFn()
    x = torch.randn(3, 4)
    ex = GradExplorer(model, x)
    report = ex.run()
    _assert_norms(report, _ref_norms(model, x))
    node = ex.graph.node("SquareBackward#0")  # Square.apply is called in CustomFn.forward
    assert node.module == "" and node.op == "SquareBackward"
    assert node.grad_norm is not None and node.grad_norm > 0
    assert ("a/AddmmBackward0#0", "SquareBackward#0") in {(e.src, e.dst) for e in ex.graph.edges}


def test_custom_function_as_last_op_is_not_the_loss() -> None:
    class SquareLast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x):
            return Square.apply(self.fc(x))

    ex = GradExplorer(SquareLast(), torch.randn(2, 3))
    ex.run()
    assert ex.graph.node("SquareBackward#0").module == ""
    assert {n.op for n in ex.graph.nodes if n.module == "loss"} == {"SumBackward0", "Output"}


def test_custom_function_inside_a_module_belongs_to_it() -> None:
    class Inner(nn.Module):
        def forward(self, x):
            return Square.apply(x)

    model = nn.Sequential(nn.Linear(3, 3), Inner(), nn.Linear(3, 1))
    ex = GradExplorer(model, torch.randn(2, 3))
    ex.run()
    assert ex.graph.node("1/SquareBackward#0").module == "1"


class DeepChain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 3)

    def forward(self, x):
        x = self.fc(x)
        for _ in range(1500):
            x = x * 1.0001 + 0.0
        return x


def test_deep_chain_no_recursion_error() -> None:
    torch.manual_seed(0)
    model = DeepChain()
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        x = torch.randn(2, 3)
        ex = GradExplorer(model, x)
        report = ex.run()
        graph = ex.graph
        folded = graph.view(depth=0)
        depth = graph.auto_depth(50)
    finally:
        sys.setrecursionlimit(old)
    ops = Counter(n.op for n in graph.nodes)
    assert ops["MulBackward0"] == 1500 and ops["AddBackward0"] == 1500
    assert len(graph.nodes) > 3000
    assert report.param_status == {"fc.weight": "healthy", "fc.bias": "healthy"}
    _assert_norms(report, _ref_norms(model, x))
    # fc's 6 nodes (2 ops, 2 params, 2 AccumulateGrad) and the loss's 2 fold into one each
    assert "module:fc" in folded and len(folded.nodes) == len(graph.nodes) - 6
    assert depth == 0  # nothing to fold but fc: the smallest view is the best there is
