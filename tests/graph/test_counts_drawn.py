"""Every node count a reader sees is of drawn nodes: a folded module's "N nodes" is what
unfolding it draws (AccumulateGrad nodes are merged into their parameters, never drawn), so
no part claims more nodes than the "N of M nodes shown" total."""

from __future__ import annotations

import re

import pytest
import torch
from small_models import HF_VOCAB, tiny_bert_config
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.graph.ghosts import add_ghosts
from gradviz_widgets.graph.grad_graph import GradGraph
from gradviz_widgets.graph.nodes import drawn_count
from gradviz_widgets.render.dot import render_dot

COUNT = re.compile(r" · (\d+) nodes?\b")


def _full(ex: GradExplorer) -> GradGraph:
    ex.run()
    return add_ghosts(ex.graph, ex.report.none_reasons)  # as the widget draws it


@pytest.fixture(scope="module")
def bert() -> GradGraph:
    pytest.importorskip("transformers")
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    net = BertForSequenceClassification(tiny_bert_config())
    ids = torch.randint(0, HF_VOCAB, (2, 8))
    ex = GradExplorer(net, {"input_ids": ids, "labels": torch.tensor([0, 1])})
    yield _full(ex)
    ex.close()


@pytest.fixture(scope="module")
def frozen_mlp() -> GradGraph:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Sequential(nn.Linear(6, 6), nn.ReLU()))
    net[0].requires_grad_(False)  # ghosts: drawn, so counted
    ex = GradExplorer(net, torch.randn(3, 4), loss_fn=nn.MSELoss(), target=torch.zeros(3, 6))
    yield _full(ex)
    ex.close()


def _label_count(label: str) -> int:
    found = COUNT.search(label)
    assert found, label
    return int(found.group(1))


@pytest.mark.parametrize("name", ["bert", "frozen_mlp"])
def test_folded_counts_are_what_unfolding_draws(name: str, request: pytest.FixtureRequest) -> None:
    full = request.getfixturevalue(name)
    drawn = render_dot(full).node_ids
    assert len(drawn) == drawn_count(full.nodes)  # the "of M nodes" total
    for depth in range(full.max_depth):
        view = full.view(depth, group=False)
        shown = 0
        for n in view.nodes:
            if n.kind == "module":
                inside = len(drawn & set(n.members))
                assert (
                    _label_count(n.label) == inside == drawn_count(full.by_id[m] for m in n.members)
                )
                shown += inside
            else:
                shown += n.id in drawn
        assert shown == len(drawn), f"depth {depth}: the parts add up to the whole"


def test_no_bert_part_claims_more_than_the_whole(bert: GradGraph) -> None:
    total = drawn_count(bert.nodes)
    encoder = bert.view(1, group=False).node("module:bert.encoder")
    assert _label_count(encoder.label) < total
    assert any(bert.by_id[m].kind == "accumulate" for m in encoder.members)  # kept for lookups


def test_a_folded_linear_says_the_four_nodes_it_unfolds_to(frozen_mlp: GradGraph) -> None:
    linear = frozen_mlp.view(1, group=False).node("module:2.0")
    assert " · 4 nodes" in linear.label  # AddmmBackward0, TBackward0, weight, bias
