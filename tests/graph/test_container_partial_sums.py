"""A bias computed once and read by every block of a ModuleList and by the head (T5's position
bias): the ×N group of all the blocks shows, on its edge from the bias, the norm of the sum of
the blocks' pieces, measured in the run for the container (`blocks` is never called, so no
module call holds those pieces). It had printed the per-block norms in quadrature (8.65 for
10.25 with 160 blocks) and, with 5 blocks dead, the status "zero". A group of only some of the
blocks stays in quadrature, but its status follows its number, never "zero" above 0."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.graph.flows import Flows, in_quadrature
from gradviz_widgets.graph.grad_graph import GradGraph
from gradviz_widgets.render.dot import render_dot


class Block(nn.Module):
    def __init__(self, reads: int = 1) -> None:
        super().__init__()
        self.f, self.g, self.reads = nn.Linear(4, 4), nn.Linear(4, 4), reads

    def forward(self, h: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = h + torch.tanh(self.g(torch.relu(self.f(h) + b)))
        return out * torch.sigmoid(b) if self.reads == 2 else out


class Other(Block):
    """The same parameters, another class: a run of its own."""


class Net(nn.Module):
    def __init__(self, blocks: list[nn.Module]) -> None:
        super().__init__()
        self.bias, self.blocks, self.head = nn.Linear(4, 4), nn.ModuleList(blocks), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.bias(x)  # computed once, read by every block and by the head
        h = x
        for block in self.blocks:
            h = block(h, b)
        return self.head(h + b).sum()


def _net(blocks: list[nn.Module], dead: tuple[int, ...]) -> Net:
    net = Net(blocks).double()
    with torch.no_grad():
        for i in dead:  # relu off everywhere: the block sends the bias exactly 0.0
            net.blocks[i].f.bias.fill_(-1e3)  # type: ignore[union-attr]
    return net


def _into_bias(net: Net, x: torch.Tensor, blocks: range) -> float:
    """float64: the norm of what `blocks` sent the bias together."""
    ref = copy.deepcopy(net)
    b = ref.bias(x)
    mine = b.detach().requires_grad_(True)
    h = x
    for i, block in enumerate(ref.blocks):
        h = block(h, mine if i in blocks else b)
    (g,) = torch.autograd.grad(ref.head(h + b).sum(), mine)
    return g.norm().item()


def _run(net: Net, x: torch.Tensor) -> tuple[GradExplorer, GradGraph]:
    ex = GradExplorer(net, x, loss_fn=lambda out: out)
    ex.run()
    return ex, ex.graph.view(depth=0, group=True)


@pytest.mark.parametrize("reads", [1, 2])
def test_the_edge_into_a_group_of_all_the_blocks_is_exact(reads: int) -> None:
    torch.manual_seed(0)
    net, x = _net([Block(reads) for _ in range(12)], dead=(2, 7)), torch.randn(3, 4).double()
    ex, view = _run(net, x)
    (edge,) = [e for e in view.edges if e.src == "module:bias" and e.dst.startswith("group:")]
    assert edge.dst == "group:blocks.0-11"
    true = _into_bias(net, x, range(12))
    assert math.isclose(edge.grad_norm or 0.0, true, rel_tol=1e-9)
    assert edge.status == "healthy" and not edge.approx
    ex.close()


def test_one_sum_per_container_not_per_block() -> None:
    """The bias gets one partial sum (the container's): no work per block beyond one add."""
    torch.manual_seed(1)
    net, x = _net([Block() for _ in range(12)], dead=()), torch.randn(3, 4).double()
    ex, _ = _run(net, x)
    mine = [p for p in ex.graph.partials if p.src.startswith("bias/")]
    assert [len(p.dsts) for p in mine] == [12]
    ex.close()


def test_a_group_of_some_of_the_blocks_stays_in_quadrature_and_is_not_zero() -> None:
    torch.manual_seed(2)
    blocks = [Block() for _ in range(6)] + [Other() for _ in range(6)]
    net, x = _net(blocks, dead=(0, 3)), torch.randn(3, 4).double()
    ex, view = _run(net, x)
    (edge,) = [e for e in view.edges if e.src == "module:bias" and e.dst == "group:blocks.0-5"]
    graph = ex.graph
    first = {f"blocks.{i}" for i in range(6)}
    parts = [e for e in graph.edges if e.src.startswith("bias/") and e.dst.split("/")[0] in first]
    summed = Flows(graph.by_id, graph.edges, graph.partials).sums(parts)
    assert len(parts) == 6 and in_quadrature(summed)  # no run measured these six together
    assert "zero" in {e.status for e in parts}
    assert math.isclose(edge.grad_norm or 0.0, math.hypot(*(e.grad_norm or 0.0 for e in parts)))
    assert edge.grad_norm and edge.status == "healthy"
    # the approximation says so: marked on the edge, drawn "≈" with a tooltip
    assert edge.approx
    dot = render_dot(view).dot
    marked = {(e.src, e.dst) for e in view.edges if e.approx}
    assert marked == {("module:bias", "group:blocks.0-5"), ("module:bias", "group:blocks.6-11")}
    assert sum('label="≈"' in line for line in dot.splitlines() if "->" in line) == 2
    ex.close()
