"""The user's own `register_full_backward_hook` on a module: the explorer's edges into that
module carry what left the hook (after the user's change), checked against float64 references
from plain autograd (tensor hooks on the tensors each edge stands for, in a float64 copy).

A report said the graph showed, for one edge into a hooked module, the value before the hook.
It did when the hooked module's input reaches it through a second module hook node (an outer
module with a full backward hook of its own, the user's or the explorer's `set_hook`) and that
outer module also uses the same input elsewhere (a residual `sub(x) + x`): only the outermost
hook node of the chain was kept, and its input is shared, so the edge was measured at the
consumer, before the inner hook. Each edge now keeps the whole chain and is measured at the
deepest hook node whose input carries it alone (trace/walk.py `_deepest_unshared`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer

SCALE = 10.0


def tap(store: dict, name: str, t: torch.Tensor) -> torch.Tensor:
    """Reference models only: keep the gradient that reaches `t` (plain autograd)."""
    if getattr(t, "requires_grad", False):
        t.register_hook(lambda g: store.__setitem__(name, g.detach().clone()))
    return t


class Sub(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x))


class Block(nn.Module):
    """`out(sub(x) + x)`: the block's input is used by `sub` and by the residual add."""

    def __init__(self, residual: bool = True) -> None:
        super().__init__()
        self.sub, self.out, self.residual = Sub(), nn.Linear(4, 2), residual
        self.taps: dict | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xs = x
        if self.taps is not None:  # an identity the reference adds to see sub's own part
            xs = tap(self.taps, "into_sub", x * 1.0)
        h = self.sub(xs)
        return self.out(h + x if self.residual else h)


class Net(nn.Module):
    def __init__(self, residual: bool = True) -> None:
        super().__init__()
        self.pre, self.block = nn.Linear(3, 4), Block(residual)
        self.taps: dict | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.pre(x))
        if self.taps is not None:
            tap(self.taps, "relu", h)
        return self.block(h)


def scale_input(module: nn.Module, grad_input: tuple, grad_output: tuple) -> tuple:
    return tuple(None if g is None else g * SCALE for g in grad_input)


def keep_it(module: nn.Module, grad_input: tuple, grad_output: tuple) -> None:
    return None


def reference(model: nn.Module, x: torch.Tensor, taps_on: list[nn.Module]) -> dict:
    """Float64 copy (hooks included), sum-of-output loss as the explorer's default; the taps'
    gradients by name."""
    ref = copy.deepcopy(model).double()
    taps: dict = {}
    for name, m in ref.named_modules():
        if any(name == n for n, _ in _named(model, taps_on)):
            m.taps = taps
    ref(x.double()).sum().backward()
    return {k: float(v.norm()) for k, v in taps.items()}


def _named(model: nn.Module, mods: list[nn.Module]) -> list[tuple[str, nn.Module]]:
    return [(n, m) for n, m in model.named_modules() if any(m is t for t in mods)]


def edge(ex: GradExplorer, src: str, dst: str) -> float:
    found = [e.grad_norm for e in ex.graph.edges if (e.src, e.dst) == (src, dst)]
    assert len(found) == 1, (src, dst, [(e.src, e.dst) for e in ex.graph.edges])
    return float(found[0])  # type: ignore[arg-type]


def node(ex: GradExplorer, node_id: str) -> float:
    return float(ex.graph.node(node_id).grad_norm)  # type: ignore[arg-type]


INTO_SUB = ("ReluBackward0#0", "block.sub.fc/AddmmBackward0#0")


def net_with(setup: Callable[[Net], None], residual: bool = True) -> tuple[Net, torch.Tensor]:
    torch.manual_seed(0)
    net = Net(residual)
    setup(net)
    return net, torch.randn(5, 3)


def measured(
    net: Net, x: torch.Tensor, prepare: Callable[[GradExplorer], object] | None = None
) -> tuple[float, float]:
    """(the edge into `block.sub`, the ReLU node) of one run, `prepare` applied first."""
    ex = GradExplorer(net, x)
    try:
        if prepare is not None:
            prepare(ex)
        ex.run()
        return edge(ex, *INTO_SUB), node(ex, "ReluBackward0#0")
    finally:
        ex.close()


@pytest.mark.parametrize(
    ("outer", "residual", "edge_is"),
    [
        (None, True, "into_sub"),  # the inner hook alone: what it returned
        (scale_input, False, "relu"),  # nested, the input not shared: after both hooks
        (keep_it, True, "into_sub"),  # the outer hook node's input shared (residual): after
        # the inner hook only, the outer hook's sum being the ReLU node's
    ],
)
def test_user_hooks_show_on_the_edge_into_the_module(
    outer: Callable | None, residual: bool, edge_is: str
) -> None:
    def setup(n: Net) -> None:
        n.block.sub.register_full_backward_hook(scale_input)
        if outer is not None:
            n.block.register_full_backward_hook(outer)

    net, x = net_with(setup, residual=residual)
    ref = reference(net, x, [net, net.block])
    if not residual:
        assert ref["relu"] == pytest.approx(SCALE * ref["into_sub"])  # the outer hook's too
    into_sub, relu = measured(net, x)
    assert into_sub == pytest.approx(ref[edge_is], rel=1e-6)
    assert relu == pytest.approx(ref["relu"], rel=1e-6)


def test_inner_user_hook_and_the_explorers_hook_on_the_outer_module():
    net, x = net_with(lambda n: n.block.sub.register_full_backward_hook(scale_input))
    ref = reference(net, x, [net, net.block])
    assert measured(net, x)[0] == pytest.approx(ref["into_sub"], rel=1e-6)  # right alone
    hooked = measured(net, x, lambda ex: ex.set_hook("block", "backward"))
    assert hooked[0] == pytest.approx(ref["into_sub"], rel=1e-6)


def test_explorers_modifier_on_inner_and_hook_on_outer():
    net, x = net_with(lambda n: n.block.sub.register_full_backward_hook(scale_input))
    ref = reference(net, x, [net, net.block])  # the user's x10 stands for the modifier's
    torch.manual_seed(0)

    def prepare(ex: GradExplorer) -> None:
        ex.set_modifier("block.sub", scale=SCALE)
        ex.set_hook("block", "backward")

    assert measured(Net(), x, prepare)[0] == pytest.approx(ref["into_sub"], rel=1e-6)


def test_user_hook_and_explorer_hook_on_the_same_module():
    """The explorer's hook runs after the user's (registered later): its readout and the edge
    both show the user's change."""
    net, x = net_with(lambda n: n.block.sub.register_full_backward_hook(scale_input))
    ref = reference(net, x, [net, net.block])
    ex = GradExplorer(net, x)
    ex.set_hook("block.sub", "backward")
    ex.run()
    assert edge(ex, *INTO_SUB) == pytest.approx(ref["into_sub"], rel=1e-6)
    seen = [e for e in ex.events if e.target == "block.sub" and e.phase == "backward"]
    assert seen[0].tensors["grad_input"][0].norm == pytest.approx(ref["into_sub"], rel=1e-6)
    ex.close()


class Two(nn.Module):
    """Two inputs, each used once: `fc(a) * b`."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.fc(a) * b


class TwoNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pa, self.pb, self.two = nn.Linear(3, 4), nn.Linear(3, 4), Two()
        self.taps: dict | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = torch.relu(self.pa(x)), torch.sigmoid(self.pb(x))
        if self.taps is not None:
            tap(self.taps, "a", a), tap(self.taps, "b", b)
        return self.two(a, b)


def test_module_with_two_inputs_each_edge_after_the_hook():
    torch.manual_seed(0)
    net = TwoNet()
    net.two.register_full_backward_hook(lambda m, gi, go: (gi[0] * 3.0, gi[1] * -0.5))
    x = torch.randn(5, 3)
    ref = reference(net, x, [net])
    ex = GradExplorer(net, x)
    ex.run()
    assert edge(ex, "ReluBackward0#0", "two.fc/AddmmBackward0#0") == pytest.approx(
        ref["a"], rel=1e-6
    )
    assert edge(ex, "SigmoidBackward0#0", "two/MulBackward0#0") == pytest.approx(ref["b"], rel=1e-6)
    ex.close()


class Twice(nn.Module):
    """One module called twice: `m(m(pre(x)))`."""

    def __init__(self) -> None:
        super().__init__()
        self.pre, self.m = nn.Linear(3, 4), Sub()
        self.taps: dict | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h0 = self.pre(x)
        if self.taps is not None:
            tap(self.taps, "h0", h0)
        h1 = self.m(h0)
        if self.taps is not None:
            tap(self.taps, "h1", h1)
        return self.m(h1)


def test_module_used_twice_each_call_edge_after_its_hook():
    torch.manual_seed(0)
    net = Twice()
    net.m.register_full_backward_hook(scale_input)
    x = torch.randn(5, 3)
    ref = reference(net, x, [net])
    ex = GradExplorer(net, x)
    ex.run()
    into = {(e.src, e.dst): e.grad_norm for e in ex.graph.edges if e.dst.startswith("m.fc/Addmm")}
    assert into[("pre/AddmmBackward0#0", "m.fc/AddmmBackward0#0")] == pytest.approx(
        ref["h0"], rel=1e-6
    )
    assert into[("m/TanhBackward0#0", "m.fc/AddmmBackward0#1")] == pytest.approx(
        ref["h1"], rel=1e-6
    )
    ex.close()


class SelfResidual(nn.Module):
    """A hooked module that uses its own input twice: `fc(x) + 2 * x`."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + 2.0 * x


class SelfNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pre, self.res = nn.Linear(3, 4), SelfResidual()
        self.taps: dict | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.pre(x))
        if self.taps is not None:
            tap(self.taps, "relu", h)
        return self.res(h)


def test_input_used_twice_inside_the_hooked_module_shows_contributions():
    """Documented (docs/architecture.md, "Hook nodes are see-through"): with several consumers
    of one hook-node input, each edge is that consumer's own contribution, before the hook,
    while the producer's node shows what arrived after it. Here the edges sum to 1/SCALE of
    what the user's hook sends on: a reader may take this for the reported bug."""
    torch.manual_seed(0)
    net = SelfNet()
    net.res.register_full_backward_hook(scale_input)
    x = torch.randn(5, 3)
    ref = reference(net, x, [net])
    ex = GradExplorer(net, x)
    ex.run()
    assert node(ex, "ReluBackward0#0") == pytest.approx(ref["relu"], rel=1e-6)
    plain = copy.deepcopy(net).double()
    plain.res._backward_hooks.clear()
    h = torch.relu(plain.pre(x.double())).detach().requires_grad_()
    g_fc = torch.autograd.grad(plain.res.fc(h).sum(), h)[0]
    g_mul = torch.autograd.grad((2.0 * h).sum(), h)[0]
    assert edge(ex, "ReluBackward0#0", "res.fc/AddmmBackward0#0") == pytest.approx(
        float(g_fc.norm()), rel=1e-6
    )
    assert edge(ex, "ReluBackward0#0", "res/MulBackward0#0") == pytest.approx(
        float(g_mul.norm()), rel=1e-6
    )
    assert float((g_fc + g_mul).norm()) * SCALE == pytest.approx(ref["relu"], rel=1e-6)
    ex.close()
