"""An edge that is a leaf's only way in carries the leaf's whole gradient: it takes the leaf's
number instead of measuring the same gradient twice, and only then."""

from __future__ import annotations

import torch
from torch import nn

from gradviz_widgets import ids
from gradviz_widgets.run.capture import capture
from gradviz_widgets.stats.norms import NormBatch
from gradviz_widgets.trace.walk import instrument, leaf_names, walk


def _edges_from(graph, param: str):
    acc = ids.acc_id(ids.param_id(param))
    return [e for e in graph.edges if e.src == acc]


def test_only_edge_of_a_parameter_reads_its_gradient() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.randn(3, 4)
    loss = model(x).sum()
    params = dict(model.named_parameters())
    raw = walk(loss, {}, leaf_names(params, []), {})
    instrument(raw, NormBatch(torch.device("cpu")))
    carried = {e.leaf for e in raw.edges if e.leaf is not None}
    assert carried == {ids.param_id(n) for n in params}
    assert all(e.slot is None for e in raw.edges if e.leaf is not None)

    graph = capture(model, x).graph
    norms = capture(model, x).report.param_norms
    for name in params:
        (edge,) = _edges_from(graph, name)
        assert edge.grad_norm == norms[name]  # the very same number, not a second measure


def test_shared_or_hooked_leaves_are_measured_on_their_edges() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.scale = nn.Parameter(torch.tensor(2.0))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # the weight's gradient is tripled after its edge: the edge keeps its own number
            self.lin.weight.register_hook(lambda g: g * 3)
            return (self.lin(x) * self.scale * self.scale).sum()  # scale: two edges

    torch.manual_seed(0)
    net, x = Net(), torch.randn(2, 3)
    result = capture(net, x)
    norms = result.report.param_norms
    (weight_edge,) = _edges_from(result.graph, "lin.weight")
    torch.testing.assert_close(weight_edge.grad_norm * 3, norms["lin.weight"])
    scale_edges = _edges_from(result.graph, "scale")
    assert len(scale_edges) == 2
    total = sum(e.grad_norm for e in scale_edges)  # both edges carry the same gradient
    torch.testing.assert_close(total, norms["scale"])
    (bias_edge,) = _edges_from(result.graph, "lin.bias")
    assert bias_edge.grad_norm == norms["lin.bias"]
