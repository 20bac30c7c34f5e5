"""Diagnosis that does not cry wolf, at a cost linear in the graph.

Embedding tables whose rows this batch did not index are normal sparsity, not dead units; zero
origins are found for every parameter in one pass over the graph.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from gradviz_widgets import GradExplorer, GradGraph
from gradviz_widgets.examples import UnrolledLSTM, dead_branch_example
from gradviz_widgets.report import diagnose

VOCAB = 1000
TOKENS = torch.tensor([[3, 17, 17, 256], [999, 3, 42, 8]])  # 6 distinct rows of 1,000


class Bag(nn.Module):
    """Token ids -> mean embedding -> linear; `kind` picks how the table is read."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        if kind == "embedding":
            self.emb = nn.Embedding(VOCAB, 8)
        elif kind == "sparse":
            self.emb = nn.Embedding(VOCAB, 8, sparse=True)
        elif kind == "bag":
            self.emb = nn.EmbeddingBag(VOCAB, 8, mode="mean")
        else:  # a raw table read with F.embedding inside a custom module
            self.table = nn.Parameter(torch.randn(VOCAB, 8))
        self.head = nn.Linear(8, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.kind == "bag":
            pooled = self.emb(ids)
        elif self.kind == "functional":
            pooled = F.embedding(ids, self.table).mean(1)
        else:
            pooled = self.emb(ids).mean(1)
        return self.head(pooled)


def _findings(ex: GradExplorer) -> tuple[str, ...]:
    report = ex.run()
    return diagnose.findings(report.params, report.nonfinite_origin, report.loss, ex.graph)


@pytest.mark.parametrize("kind", ["embedding", "sparse", "bag", "functional"])
def test_unindexed_embedding_rows_are_not_called_dead(kind: str) -> None:
    torch.manual_seed(0)
    model = Bag(kind)
    name = "table" if kind == "functional" else "emb.weight"
    ex = GradExplorer(model, TOKENS)
    report = ex.run()
    assert report.param(name).zero_fraction == pytest.approx(994 / 1000)
    found = _findings(ex)
    assert not any("mostly dead" in f for f in found), found
    assert f"{name}: up to 994 of 1,000 rows not used by this batch" in " ".join(found), found


def test_report_findings_know_embeddings() -> None:
    torch.manual_seed(0)
    report = GradExplorer(Bag("embedding"), TOKENS).run()
    assert not any("mostly dead" in f for f in report.findings), report.findings
    assert any("up to 994 of 1,000 rows not used" in f for f in report.findings)


def test_a_max_bag_never_says_fewer_rows_used_than_it_used() -> None:
    """EmbeddingBag(mode="max"): a used row gets a gradient only in the columns it won, so
    the share of zeros overstates the unused rows; the finding said "36 of 40 rows not used"
    as a fact where 31 were."""
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(40, 8, mode="max")
    ids, offsets = torch.randint(0, 40, (10,)), torch.tensor([0, 3, 5, 7])
    report = GradExplorer(bag, (ids, offsets)).run()
    (said,) = [f for f in report.findings if "rows not used" in f]
    bound = int(said.split("up to ")[1].split(" of ")[0])
    assert bound >= 40 - ids.unique().numel()
    assert "exactly 0.0" in said


def test_dense_layer_with_dead_units_is_still_mostly_dead() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 20), nn.ReLU(), nn.Linear(20, 1))
    with torch.no_grad():
        model[0].bias[1:].fill_(-100.0)  # 19 of 20 units never fire
    ex = GradExplorer(model, torch.randn(16, 4))
    found = _findings(ex)
    assert any("mostly dead" in f and "0.weight 95%" in f for f in found), found
    assert not any("rows not used" in f for f in found), found


def _slow_zero_origin(graph: GradGraph, leaf_id: str) -> str | None:
    """The former per-parameter search (edge map rebuilt, breadth-first from the leaf)."""
    consumers: dict[str, list] = {}
    for e in graph.edges:
        consumers.setdefault(e.src, []).append(e)
    seen = {leaf_id}
    queue = deque([leaf_id])
    while queue:
        current = queue.popleft()
        for e in consumers.get(current, ()):
            if e.grad_norm != 0.0 or e.dst in seen:
                continue
            dst = graph.node(e.dst)
            if dst.grad_norm not in (None, 0.0):
                return dst.id
            seen.add(e.dst)
            queue.append(e.dst)
    return None


def _relu_chain(layers: int, dies_at: int, width: int = 4) -> nn.Sequential:
    """Linear+ReLU blocks that pass positive inputs on (identity weights, bias 0.1), except
    block `dies_at`, whose ReLU outputs zeros for every input: the gradient dies there."""
    blocks = [nn.Sequential(nn.Linear(width, width), nn.ReLU()) for _ in range(layers)]
    with torch.no_grad():
        for block in blocks:
            block[0].weight.copy_(torch.eye(width))
            block[0].bias.fill_(0.1)
        blocks[dies_at][0].bias.fill_(-1e3)
    return nn.Sequential(*blocks)


def _small_graphs() -> dict[str, GradGraph]:
    net, x, y = dead_branch_example()
    torch.manual_seed(0)
    tied = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3), nn.ReLU())
    with torch.no_grad():
        tied[2].bias.fill_(-50.0)
    return {
        "dead_branch": GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y).graph,
        "relu_chain": GradExplorer(_relu_chain(12, 7), torch.rand(5, 4)).graph,
        "lstm": GradExplorer(UnrolledLSTM(3, 4, steps=5), torch.randn(2, 5, 3)).graph,
        "two_dead": GradExplorer(tied, torch.randn(4, 3)).graph,
    }


@pytest.mark.parametrize(("case", "graph"), list(_small_graphs().items()))
def test_zero_origins_match_the_per_parameter_search(case: str, graph: GradGraph) -> None:
    fast = diagnose.zero_origins(graph)
    slow = {n.id: _slow_zero_origin(graph, n.id) for n in graph.nodes}
    assert dict(fast) == {k: v for k, v in slow.items() if v is not None}
    if case in ("dead_branch", "relu_chain", "two_dead"):
        assert any(n.startswith("param:") for n in fast), fast  # the case has a dead path


class CountingEdges(tuple):
    """The graph's edges, counting how often the analysis walks them."""

    walks = 0

    def __iter__(self):  # noqa: ANN204
        type(self).walks += 1
        return super().__iter__()


def test_thousand_layer_chain_analysis_walks_the_edges_a_fixed_number_of_times() -> None:
    model = _relu_chain(1000, dies_at=600)
    ex = GradExplorer(model, torch.rand(2, 4))
    report = ex.run()
    zero = [p.name for p in report.params if p.status == "zero"]
    # blocks 0..600 (weight and bias) and 601's weight (its input is all zeros)
    assert sorted(zero) == sorted(
        [f"{i}.0.{k}" for i in range(601) for k in ("weight", "bias")] + ["601.0.weight"]
    )
    assert set(report.zero_origins) == set(zero)
    assert set(report.zero_origins.values()) == {"600.1/ReluBackward0#0", "601.0/AddmmBackward0#0"}

    CountingEdges.walks = 0
    graph = dataclasses.replace(ex.graph, edges=CountingEdges(ex.graph.edges))
    origins = {name: diagnose.zero_origin(graph, f"param:{name}") for name in zero}
    diagnose.nonfinite_origin(graph, report.loss)
    assert origins == report.zero_origins
    assert CountingEdges.walks <= 3, f"{CountingEdges.walks} walks over the edges"


def test_duration_covers_the_analysis(monkeypatch: pytest.MonkeyPatch) -> None:
    """duration_s is the whole run: a slow analysis step shows in it."""
    slow = diagnose.findings

    def findings(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        time.sleep(0.3)
        return slow(*args, **kwargs)

    monkeypatch.setattr(diagnose, "findings", findings)
    report = GradExplorer(nn.Linear(3, 1), torch.randn(2, 3)).run()
    assert report.duration_s >= 0.3


class MaskedNan(nn.Module):
    """sqrt(h**2) at h == 0 makes NaN in backward; the ReLU before it masks it out."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.c = nn.Linear(4, 4), nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.sqrt(torch.relu(self.a(x)) ** 2)).sum()


def test_a_nan_masked_before_any_parameter_is_a_finding() -> None:
    """From outside: the graph drew NaN/Inf edges while the status line said "all 4 gradients
    healthy" and nothing else."""
    torch.manual_seed(0)
    ex = GradExplorer(MaskedNan(), torch.randn(6, 4))
    report = ex.run()
    assert all(p.status == "healthy" for p in report.params)
    assert any(e.status == "nonfinite" for e in ex.graph.edges)
    assert report.findings == (diagnose.masked_nonfinite(report.nonfinite_origin),)
    assert "SqrtBackward0#0" in report.findings[0]


def test_nan_gradients_from_a_nan_loss_name_the_forward_op_as_such() -> None:
    """A NaN loss: the parameters' NaN gradients come from the forward's NaN, not from a
    backward node ("first at LogBackward0#0" read as if that node sent NaN back)."""

    class NanLoss(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.b, self.c = nn.Linear(4, 4), nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.c(torch.log(self.b(x))).mean()

    torch.manual_seed(0)
    report = GradExplorer(NanLoss(), torch.randn(6, 4)).run()
    line = next(f for f in report.findings if "NaN/Inf gradients" in f)
    assert f"from the NaN/Inf the forward made at {report.nonfinite_origin}" in line
    assert "Log" in report.nonfinite_origin
