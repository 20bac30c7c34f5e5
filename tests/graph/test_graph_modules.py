"""The backward graph by module: attribution of ops and leaves to module calls, and folding
into module views (edges kept and merged, expand / collapse, auto depth, boundary statuses)."""

from __future__ import annotations

import math
import re
from collections import Counter

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer, GradGraph
from gradviz_widgets.examples import UnrolledLSTM, dead_branch_example, resnet18

CE = nn.CrossEntropyLoss()


# ---- attribution ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resnet_graph() -> GradGraph:
    torch.manual_seed(0)
    model = resnet18(num_classes=3, width=4)
    ex = GradExplorer(model, torch.randn(2, 3, 32, 32), loss_fn=CE, target=torch.tensor([1, 2]))
    ex.run()
    return ex.graph


def test_ops_attributed_to_their_module(resnet_graph: GradGraph) -> None:
    conv = resnet_graph.node("layer1.0.conv1/ConvolutionBackward0#0")
    assert conv.module == "layer1.0.conv1"
    assert conv.scope == (("layer1", 0), ("layer1.0", 0), ("layer1.0.conv1", 0))
    mine = [n for n in resnet_graph.nodes if n.module == "layer1.0.conv1"]
    assert {n.kind for n in mine} == {"op", "param", "accumulate"}
    assert all(
        n.id.startswith(("layer1.0.conv1/", "param:layer1.0.conv1.", "acc:param:layer1.0.conv1."))
        for n in mine
    )
    # the residual add (`out += identity`) happens in the block's own forward
    assert resnet_graph.node("layer1.0/AddBackward0#0").module == "layer1.0"
    # nodes_of gathers the subtree
    assert {n.module for n in resnet_graph.nodes_of("layer1.0")} >= {
        "layer1.0",
        "layer1.0.conv1",
        "layer1.0.bn1",
        "layer1.0.conv2",
        "layer1.0.bn2",
    }


def test_leaves_attributed_to_owning_module(resnet_graph: GradGraph) -> None:
    for node_id, module in [
        ("param:layer1.0.conv1.weight", "layer1.0.conv1"),
        ("acc:param:layer1.0.conv1.weight", "layer1.0.conv1"),
        ("param:layer2.0.downsample.1.bias", "layer2.0.downsample.1"),
        ("acc:param:fc.weight", "fc"),
    ]:
        assert resnet_graph.node(node_id).module == module
    for n in resnet_graph.nodes:
        if n.kind in ("param", "accumulate"):
            name = n.id.split("param:", 1)[1]
            assert n.module == name.rpartition(".")[0]
            assert n.op in ("Param", "AccumulateGrad")


def test_root_and_loss_attribution(resnet_graph: GradGraph) -> None:
    root = [n for n in resnet_graph.nodes if n.module == ""]
    assert [n.op for n in root] == ["ViewBackward0"]  # torch.flatten in ResNet.forward
    assert root[0].scope == ()
    loss_nodes = {n.op for n in resnet_graph.nodes if n.module == "loss"}
    assert loss_nodes == {"NllLossBackward0", "LogSoftmaxBackward0", "Output"}
    assert resnet_graph.node("output").module == "loss"
    assert resnet_graph.modules["loss"].type == "Loss"


def test_module_called_many_times_has_call_indices() -> None:
    torch.manual_seed(0)
    steps = 5
    model = UnrolledLSTM(3, 4, steps=steps)
    ex = GradExplorer(model, torch.randn(2, steps, 3))
    ex.run()
    g = ex.graph
    assert g.modules["cell"].calls == steps
    cell_calls = {
        c
        for n in g.nodes
        if n.module == "cell" and n.kind == "op"
        for p, c in n.scope
        if p == "cell"
    }
    assert cell_calls == set(range(steps))
    per_call = Counter(c for n in g.nodes if n.kind == "op" for p, c in n.scope if p == "cell")
    assert len(set(per_call.values())) == 1  # every step made the same ops
    # shared parameters belong to no single call
    assert g.node("param:cell.weight_ih").scope == (("cell", -1),)

    view = g.view(depth=0)
    ids = Counter(n.id for n in view.nodes)
    assert set(ids) == {
        *(f"module:cell@{i}" for i in range(steps)),
        "module:cell@params",
        "module:head",
        "module:loss",
    }
    assert all(v == 1 for v in ids.values())
    assert view.node("module:cell@params").members == tuple(
        n.id for n in g.nodes if n.module == "cell" and n.kind in ("param", "accumulate")
    )
    edges = {(e.src, e.dst) for e in view.edges}
    for i in range(steps):
        assert ("module:cell@params", f"module:cell@{i}") in edges
    for i in range(steps - 1):
        assert (f"module:cell@{i}", f"module:cell@{i + 1}") in edges
    assert (f"module:cell@{steps - 1}", "module:head") in edges


# ---- views ------------------------------------------------------------------------------------


def _check_view(graph: GradGraph, view: GradGraph) -> None:
    rep = {n.id: n.id for n in view.nodes if n.kind != "module"}
    for n in view.nodes:
        for m in n.members:
            rep[m] = n.id
    assert set(rep) == {n.id for n in graph.nodes}  # every node is shown or folded once
    expected: dict[tuple[str, str], list] = {}
    for e in graph.edges:
        s, d = rep[e.src], rep[e.dst]
        if s != d:
            expected.setdefault((s, d), []).append(e)
    got = [(e.src, e.dst) for e in view.edges]
    assert len(got) == len(set(got)), "parallel edges were not merged"
    assert set(got) == set(expected), "an edge between groups was lost or invented"
    consumers = Counter(e.src for e in graph.edges)
    for e in view.edges:
        # a producer whose every consumer is in the merged set counts once, by its own norm
        # (the sum of the pieces it got: tests/graph/test_folded_sums.py)
        by_src: dict[str, list] = {}
        for x in expected[(e.src, e.dst)]:
            by_src.setdefault(x.src, []).append(x.grad_norm)
        norms = []
        for src, pieces in by_src.items():
            whole = len(pieces) > 1 and consumers[src] == len(pieces)
            norms += [graph.by_id[src].grad_norm] if whole else pieces
        norms = [v for v in norms if v is not None]
        if norms:
            assert e.grad_norm == pytest.approx(math.sqrt(sum(v * v for v in norms)), rel=1e-12)


def test_view_keeps_and_merges_edges(resnet_graph: GradGraph) -> None:
    for depth in (0, 1, 2):
        view = resnet_graph.view(depth=depth)
        _check_view(resnet_graph, view)
        assert len(view.nodes) < len(resnet_graph.nodes)
    top = resnet_graph.view(depth=0)
    ids = {n.id for n in top.nodes}
    assert {"module:layer1", "module:layer2", "module:fc", "module:loss"} <= ids
    assert "ViewBackward0#0" in ids  # root-level op stays visible
    # layer2.0 reads layer1's output twice (conv1 and downsample): one merged edge
    parallel = [
        e for e in resnet_graph.edges if e.src.startswith("layer1.") and e.dst.startswith("layer2.")
    ]
    assert len(parallel) == 2
    merged = [e for e in top.edges if (e.src, e.dst) == ("module:layer1", "module:layer2")]
    assert len(merged) == 1
    # one tensor's gradient in two pieces: their sum is what layer1's output got (not the
    # pieces in quadrature, which read 0.07 % high here)
    assert parallel[0].src == parallel[1].src
    assert merged[0].grad_norm == resnet_graph.by_id[parallel[0].src].grad_norm
    assert merged[0].grad_norm != math.hypot(parallel[0].grad_norm, parallel[1].grad_norm)
    layer1 = top.node("module:layer1")
    assert layer1.kind == "module" and layer1.op == "Sequential"
    assert set(layer1.members) == {
        n.id for n in resnet_graph.nodes if n.module == "layer1" or n.module.startswith("layer1.")
    }


def test_view_expand_and_collapse(resnet_graph: GradGraph) -> None:
    view = resnet_graph.view(depth=0, expand=["layer1"])
    ids = {n.id for n in view.nodes}
    assert "module:layer1" not in ids and {"module:layer1.0", "module:layer1.1"} <= ids
    _check_view(resnet_graph, view)
    only = resnet_graph.view(collapse=["layer3.1"])
    assert {n.id for n in only.nodes if n.kind == "module"} == {"module:layer3.1"}
    assert "layer1.0.conv1/ConvolutionBackward0#0" in only
    assert only.collapsed == frozenset({"layer3.1"})
    _check_view(resnet_graph, only)
    assert resnet_graph.view() == resnet_graph


def test_auto_depth_respects_cap(resnet_graph: GradGraph) -> None:
    assert resnet_graph.auto_depth(10_000) is None
    for cap in (15, 60, 120, len(resnet_graph.nodes) - 1):
        depth = resnet_graph.auto_depth(cap)
        assert depth is not None
        assert len(resnet_graph.view(depth).nodes) <= cap
        if depth + 1 < resnet_graph.max_depth:  # the deepest that fits
            assert len(resnet_graph.view(depth + 1).nodes) > cap


@pytest.mark.parametrize("track_flow", [True, False])
def test_folded_status_says_what_crosses_the_boundary(track_flow: bool) -> None:
    net, x, y = dead_branch_example()
    ex = GradExplorer(net, x, loss_fn=CE, target=y, track_flow=track_flow)
    view = ex.graph.view(depth=0)
    assert ex.graph.node("param:dead.weight").status == "zero"
    if not track_flow:  # what crosses a boundary between ops was not measured: no status
        for box in ("gate", "main1", "dead"):  # nor a number of something else inside
            node = view.node(f"module:{box}")
            assert (node.status, node.grad_norm, node.measured) == ("unmeasured", None, False)
        assert view.node("module:gate").param_status == "zero"  # its parameters still say
        return
    assert view.node("module:gate").status == "zero"  # nothing leaves the dead gate
    assert view.node("module:main1").status == "healthy"
    # `dead` gets zeros in its weight (its input is all zeros) but passes a healthy gradient
    # to its bias (and to that input): folded it is healthy, unfolded the zero shows inside
    assert view.node("module:dead").status == "healthy"


def test_folded_lstm_step_with_zero_initial_state_is_not_dead() -> None:
    torch.manual_seed(0)
    steps = 4
    ex = GradExplorer(UnrolledLSTM(3, 5, steps=steps), torch.randn(2, steps, 3))
    graph = ex.graph
    view = graph.view(depth=0)
    first = view.node("module:cell@0")
    # the zero initial state sends weight_hh a zero gradient inside the first step...
    assert "zero" in {graph.node(m).status for m in first.members}
    # ...while a healthy gradient leaves the step for its parameters
    assert {view.node(f"module:cell@{i}").status for i in range(steps)} == {"healthy"}
    assert view.node("module:cell@params").status == "healthy"
    assert (
        graph.view(depth=0, expand=["cell"])
        .node(next(m for m in first.members if graph.node(m).status == "zero"))
        .status
        == "zero"
    )


def test_view_arguments_are_checked(resnet_graph: GradGraph) -> None:
    """An outside tester: depth="1" raised a bare TypeError from inside the fold, depth=-1
    folded everything silently, expand="layer1" was split into characters."""
    from gradviz_widgets.errors import GradExplorerError

    for bad, said in (
        ({"depth": "1"}, "depth must be an int >= 0"),
        ({"depth": -1}, "depth must be an int >= 0"),
        ({"depth": True}, "depth must be an int >= 0"),
        ({"expand": "layer1"}, "expand must be a list of module paths (e.g. ['layer1'])"),
        ({"collapse": [1]}, "collapse must hold module paths"),
        ({"group": "yes"}, "group must be True, False or None"),
    ):
        with pytest.raises(GradExplorerError, match=re.escape(said)):
            resnet_graph.view(**bad)
    assert resnet_graph.view(depth=0, expand=("layer1",)).node("module:layer2")
