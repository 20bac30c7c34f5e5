"""The backward graph as walked: parity with torchviz, stable ids, no recursion limit."""

from __future__ import annotations

import copy
import re
import warnings
from collections import Counter

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
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
