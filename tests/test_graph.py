"""The backward graph: parity with torchviz, stable ids, attribution, folding into module views."""

from __future__ import annotations

import copy
import math
import re
import sys
import warnings
from collections import Counter

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from gradviz_widgets import GradExplorer, GradGraph
from gradviz_widgets.examples import UnrolledLSTM, dead_branch_example, gpt2_like, resnet18

CE = nn.CrossEntropyLoss()

NODE_RE = re.compile(r"^\t(\d+) \[label=(.*?)(?: fillcolor=(\w+))?\]\s*$", re.S)
EDGE_RE = re.compile(r"^\t(\d+) -> (\d+)")


def torchviz_graph(loss: torch.Tensor, model: nn.Module):
    """(node id -> (label, color), edge list) of torchviz's drawing of `loss`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchviz imports distutils.LooseVersion
        from torchviz import make_dot

        dot = make_dot(loss, params=dict(model.named_parameters()))
    nodes, edges = {}, []
    for line in dot.body:
        m = EDGE_RE.match(line)
        if m:
            edges.append((m[1], m[2]))
            continue
        m = NODE_RE.match(line)
        assert m, f"unparsed torchviz line {line!r}"
        nodes[m[1]] = (m[2].strip('"'), m[3])
    return nodes, edges


def plain_loss(model, x, loss_fn, target):
    out = model(x)
    return loss_fn(out, target) if loss_fn else out.sum()


def _parity_cases():
    def dead():
        net, x, y = dead_branch_example()
        return net, x, CE, y

    def resnet():
        torch.manual_seed(0)
        return (
            resnet18(num_classes=3, width=4).train(),
            torch.randn(2, 3, 32, 32),
            CE,
            torch.tensor([0, 2]),
        )

    def gpt2():
        torch.manual_seed(0)
        return (
            gpt2_like(n_layer=1, d_model=8, n_head=2, vocab=16, seq=8),
            torch.randint(0, 16, (2, 6)),
            None,
            None,
        )

    def lstm():
        torch.manual_seed(0)
        return UnrolledLSTM(3, 5, steps=4), torch.randn(2, 4, 3), None, None

    return {"dead_branch": dead, "resnet18": resnet, "gpt2_like": gpt2, "unrolled_lstm": lstm}


@pytest.mark.parametrize("case", list(_parity_cases()))
def test_node_and_edge_parity_with_torchviz(case: str) -> None:
    model, x, loss_fn, target = _parity_cases()[case]()
    ex = GradExplorer(model, x, loss_fn=loss_fn, target=target)
    graph = ex.run() and ex.graph
    twin = copy.deepcopy(model)
    tv_nodes, tv_edges = torchviz_graph(plain_loss(twin, x, loss_fn, target), twin)

    assert len(graph.nodes) == len(tv_nodes)
    assert len(graph.edges) == len(tv_edges)
    tv_ops = Counter(label for label, color in tv_nodes.values() if color is None)
    ours_ops = Counter(n.op for n in graph.nodes if n.kind in ("op", "accumulate"))
    assert ours_ops == tv_ops
    # parameters: torchviz labels "name\n (shape)"; ours are param:<name> with the same shape
    tv_params = Counter(
        label.split("\n")[0] for label, color in tv_nodes.values() if color == "lightblue"
    )
    ours_params = Counter(n.id.split(":", 1)[1] for n in graph.nodes if n.kind == "param")
    assert ours_params == tv_params
    named = dict(twin.named_parameters())
    for n in graph.nodes:
        if n.kind == "param":
            assert n.shape == tuple(named[n.id[len("param:") :]].shape)
    # exactly one output node, fed by the loss's grad_fn
    outputs = [n for n in graph.nodes if n.kind == "output"]
    assert len(outputs) == 1 and len([e for e in graph.edges if e.dst == "output"]) == 1
    assert {e.src for e in graph.edges} | {e.dst for e in graph.edges} <= {
        n.id for n in graph.nodes
    }


def test_ids_are_stable_across_runs_and_inputs() -> None:
    torch.manual_seed(0)
    model = resnet18(num_classes=3, width=4)
    ex = GradExplorer(model, torch.randn(2, 3, 32, 32))
    ex.run()
    first = [n.id for n in ex.graph.nodes]
    first_edges = [(e.src, e.dst) for e in ex.graph.edges]
    ex.run()
    assert [n.id for n in ex.graph.nodes] == first
    assert [(e.src, e.dst) for e in ex.graph.edges] == first_edges
    other = GradExplorer(copy.deepcopy(model), torch.randn(2, 3, 32, 32))
    other.run()
    assert [n.id for n in other.graph.nodes] == first
    assert len(set(first)) == len(first)
    # the documented id forms
    assert "layer1.0.conv1/ConvolutionBackward0#0" in first
    assert "param:layer1.0.conv1.weight" in first
    assert "acc:param:layer1.0.conv1.weight" in first
    assert "output" in first
    for node_id in first:
        assert re.fullmatch(r"(param|acc:param):[\w.]+|output|([\w.]+/)?\w+#\d+", node_id), node_id


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
    for e in view.edges:
        norms = [x.grad_norm for x in expected[(e.src, e.dst)] if x.grad_norm is not None]
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
    assert merged[0].grad_norm == pytest.approx(
        math.hypot(parallel[0].grad_norm, parallel[1].grad_norm), rel=1e-12
    )
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
    assert view.node("module:gate").status == "zero"  # nothing leaves the dead gate
    assert view.node("module:main1").status == "healthy"
    # `dead` gets zeros in its weight (its input is all zeros) but passes a healthy gradient
    # to its bias (and to that input): folded it is healthy, unfolded the zero shows inside
    assert view.node("module:dead").status == "healthy"
    assert ex.graph.node("param:dead.weight").status == "zero"


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
