"""A loss that is NaN/Inf is drawn as such, though the gradient it sends back is a finite 1.0.

A NaN made in the forward pass (a sqrt of a negative, a NaN constant added to the loss) can
leave every gradient finite: the graph was all green while the status line named the op. The
op whose output first held NaN/Inf and the output node now say so on every surface (the DOT the
widget, the page and the exports draw, the tooltip, the first view's focus, the JSON).
"""

from __future__ import annotations

import re

import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.graph.nodes import FORWARD_INSIDE, FORWARD_ORIGIN
from gradviz_widgets.render.dot import node_info, render_dot
from gradviz_widgets.report.export import load_json, report_json
from gradviz_widgets.vocabulary import STYLES, alarm_rank


class SqrtNet(nn.Module):
    """sqrt of a Linear's output: NaN where it is negative, made inside module `mid`."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.mid = Root()
        self.last = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.last(self.mid(self.first(x)))


class Root(nn.Module):
    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(h)


def _nan_constant(out: torch.Tensor) -> torch.Tensor:
    return out.sum() + torch.tensor(float("nan"))  # no gradient: every gradient stays finite


def _explorer(loss_fn=None) -> GradExplorer:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    return GradExplorer(net, torch.randn(5, 4), loss_fn=loss_fn)


def _line_of(dot_text: str, label_part: str) -> str:
    return next(line for line in dot_text.splitlines() if label_part in line)


def test_a_nan_loss_with_healthy_gradients_is_not_drawn_healthy() -> None:
    ex = _explorer(_nan_constant)
    report = ex.run()
    assert all(p.status == "healthy" for p in report.params)  # what used to be all we drew
    notes = {n.id: n.forward_note for n in ex.graph.nodes if n.forward_note}
    assert notes == {report.nonfinite_origin: FORWARD_ORIGIN, "output": "loss = nan"}
    drawn = render_dot(ex.graph)
    red = STYLES["nonfinite"].line
    for part in ("⚠ loss = nan", f"⚠ {FORWARD_ORIGIN}"):
        line = _line_of(drawn.dot, part)
        assert f'color="{red}"' in line and 'penwidth="3.5"' in line
    origin = ex.graph.node(report.nonfinite_origin)
    info = node_info(origin)
    assert info["alarm"] == alarm_rank("nonfinite")  # the first view opens on it
    assert FORWARD_ORIGIN in info["status_text"] and FORWARD_ORIGIN in info["label"]


def test_a_folded_module_says_the_nan_was_made_inside() -> None:
    torch.manual_seed(1)
    ex = GradExplorer(SqrtNet(), torch.randn(3, 4))
    report = ex.run()
    assert report.nonfinite_origin is not None and "Sqrt" in report.nonfinite_origin
    folded = ex.graph.view(0)
    notes = {n.id: n.forward_note for n in folded.nodes if n.forward_note}
    assert notes["module:mid"] == FORWARD_INSIDE
    assert all(note != FORWARD_ORIGIN for note in notes.values())  # the op itself is folded
    assert f"⚠ {FORWARD_INSIDE}" in _line_of(render_dot(folded).dot, "mid")
    unfolded = {n.id: n.forward_note for n in ex.graph.view(1).nodes if n.forward_note}
    assert unfolded[report.nonfinite_origin] == FORWARD_ORIGIN
    # the NaN spreads backward: nodes after it draw the dashed NaN/Inf outline; the op that
    # made it stands apart (found from outside: its outline was the same as theirs)
    lines = render_dot(ex.graph).dot.splitlines()
    assert any("dashed" in line and "⚠" not in line for line in lines)
    heavy = [line for line in lines if 'penwidth="3.5"' in line]
    assert heavy and all("⚠" in line and "dashed" not in line for line in heavy)


def test_the_loss_folded_with_its_ops_keeps_its_value() -> None:
    ex = _explorer(_nan_constant)
    ex.run()
    loss = next(n for n in ex.graph.view(0).nodes if "output" in n.members)
    assert loss.forward_note == f"loss = nan · {FORWARD_INSIDE}"


def test_an_infinite_loss_says_its_value() -> None:
    ex = _explorer(lambda out: out.sum() + torch.tensor(float("inf")))
    ex.run()
    assert ex.graph.node("output").forward_note == "loss = inf"


def test_a_finite_loss_notes_nothing_even_with_nan_gradients() -> None:
    """A NaN made in backward (sqrt's slope at 0) is the gradients' own status, drawn as
    before."""
    finite = _explorer(lambda out: (out - out.detach()).abs().sqrt().sum())
    report = finite.run()
    assert report.loss == 0.0
    assert any(p.status == "nonfinite" for p in report.params)
    assert not [n for n in finite.graph.nodes if n.forward_note]
    assert "⚠" not in finite.to_dot()


def test_the_json_export_keeps_the_notes() -> None:
    ex = _explorer(_nan_constant)
    report = ex.run()
    _, graph = load_json(report_json(report, ex.graph))
    assert graph is not None
    assert {n.id: n.forward_note for n in graph.nodes if n.forward_note} == {
        n.id: n.forward_note for n in ex.graph.nodes if n.forward_note
    }
    assert re.search(r"⚠ loss = nan", render_dot(graph).dot)
