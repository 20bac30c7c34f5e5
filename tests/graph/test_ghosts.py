"""Ghost nodes: where the gradient was cut (frozen, detached, no_grad, never called) is drawn."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples.pathologies import frozen_and_detached_example
from gradviz_widgets.graph.ghosts import add_ghosts, cut_of, is_ghost
from gradviz_widgets.render.dot import render_dot

CUTS = {
    "frozen": "frozen",
    "detached": "detached",
    "no_grad_branch": "no_grad",
    "unused": "never called",
    "maybe": "never called",
}


@pytest.fixture(scope="module")
def run():
    model, x, _ = frozen_and_detached_example()
    ex = GradExplorer(model, x)
    report = ex.run()
    return ex.graph, report


def test_every_unreached_param_is_a_ghost_with_its_cut(run):
    graph, report = run
    ghosted = add_ghosts(graph, report.none_reasons)
    ghosts = {n.id: n for n in ghosted.nodes if n.kind == "ghost"}
    assert set(ghosts) == {f"ghost:param:{name}" for name in report.none_reasons}
    for n in ghosts.values():
        assert n.label.endswith("✂ " + CUTS[n.module])
        assert n.scope[-1][0] == n.module  # in its module's cluster
        assert n.grad_norm is None and is_ghost(n.id)


def test_ghosts_leave_the_real_graph_alone(run):
    graph, report = run
    ghosted = add_ghosts(graph, report.none_reasons)
    assert ghosted.edges == graph.edges
    real = [n for n in ghosted.nodes if n.kind != "ghost"]
    assert tuple(real) == graph.nodes
    assert add_ghosts(ghosted, report.none_reasons).nodes == ghosted.nodes  # idempotent
    for depth in (None, 0):
        plain = {n.id: (n.grad_norm, n.status) for n in graph.view(depth).nodes}
        with_g = {n.id: (n.grad_norm, n.status) for n in ghosted.view(depth).nodes}
        assert {k: v for k, v in with_g.items() if k in plain} == plain


def test_ghosts_drawn_dashed_grey_in_their_cluster(run):
    graph, report = run
    drawn = render_dot(add_ghosts(graph, report.none_reasons))
    key = next(k for k, v in drawn.keys.items() if v == "ghost:param:frozen.weight")
    line = next(li for li in drawn.dot.splitlines() if li.strip().startswith(f"{key} ["))
    assert 'style="dashed,rounded"' in line and "✂ frozen" in line
    assert "frozen" in {v for k, v in drawn.keys.items() if k.startswith("c")}


def test_folded_module_of_ghosts_shows_its_cut(run):
    graph, report = run
    view = add_ghosts(graph, report.none_reasons).view(0)
    node = view.node("module:no_grad_branch")
    assert node.label.endswith("✂ no_grad") and node.grad_norm is None
    assert node.members == ("ghost:param:no_grad_branch.weight", "ghost:param:no_grad_branch.bias")


def test_cut_names():
    assert cut_of(None) == "no gradient"
    assert cut_of("module 'x' ran under torch.no_grad() (or inference_mode)") == "no_grad"


def test_a_cut_is_read_from_the_reason_not_from_the_module_name():
    """A trainable module named `unfrozen` run under no_grad was drawn "✂ frozen" (the words
    of the reason were searched, the quoted module name included)."""

    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.live, self.unfrozen = nn.Linear(4, 3), nn.Linear(4, 3)
            self.detached_no_grad = nn.Linear(4, 3)  # never called

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad():
                side = self.unfrozen(x)
            return self.live(x) + side

    ex = GradExplorer(M(), torch.randn(5, 4))
    report = ex.run()
    ghosts = add_ghosts(ex.graph, report.none_reasons)
    assert ghosts.node("ghost:param:unfrozen.weight").label.endswith("✂ no_grad")
    assert ghosts.node("ghost:param:detached_no_grad.bias").label.endswith("✂ never called")
    ex.close()


def test_a_frozen_tied_weight_is_one_ghost_where_it_lives():
    """A tied weight is listed by every module that holds it (GPT-2's `lm_head` lists
    `transformer.wte.weight`): frozen, it drew two nodes with one id, which the page keys by."""

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(10, 4)
            self.body = nn.Linear(4, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, ids):
            return self.head(self.body(self.wte(ids)))

    model = Tied()
    model.wte.weight.requires_grad_(False)
    ex = GradExplorer(model, torch.tensor([[1, 2, 3]]))
    report = ex.run()
    ghosted = add_ghosts(ex.graph, report.none_reasons)
    ids = [n.id for n in ghosted.nodes]
    assert len(ids) == len(set(ids))
    (ghost,) = (n for n in ghosted.nodes if n.kind == "ghost")
    assert ghost.id == "ghost:param:wte.weight" and ghost.module == "wte"
    assert ghost.scope[-1][0] == "wte"


def test_to_dot_and_export_draw_the_ghosts_too():
    """`ex.to_dot()` / `ex.export_svg()` left out every parameter no gradient reached, which the
    widget, its Download SVG and export_html draw (an outside try-out: a MoE's unused experts)."""
    model, x, _ = frozen_and_detached_example()
    ex = GradExplorer(model, x)
    report = ex.run()
    full, folded = ex.to_dot(), ex.to_dot(depth=0)
    for name in report.none_reasons:
        assert f"{name}\\n✂ " in full, name  # its ghost node
        assert f"{name.split('.')[0]} · Linear · 2 nodes · ✂ " in folded, name  # its box's cut
    assert "✂ frozen" in full and "✂ never called" in full
