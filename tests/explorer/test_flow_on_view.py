"""`GradExplorer.run(view=...)` measures the flow only where one view draws it (the widget's
re-runs: issue 21's cost), and that view then reads exactly as after a run that measured every
edge: the same nodes, edges, norms, statuses and labels. What it did not measure says so."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example
from gradviz_widgets.examples.zoo import ZOO_NAMES, zoo
from gradviz_widgets.graph.grad_graph import GradGraph
from gradviz_widgets.graph.measure import drawn_measured, unmeasured
from gradviz_widgets.render.dot import render_dot
from gradviz_widgets.run.timing import stage_times
from tests.small_models import tiny_bert_config


def _drawn(view: GradGraph) -> tuple[list, list]:
    nodes = sorted(
        (n.id, n.grad_norm, n.status, n.label, n.grad_out, n.param_text, n.measured)
        for n in view.nodes
    )
    edges = sorted((e.src, e.dst, e.grad_norm, e.status, e.approx, e.measured) for e in view.edges)
    return nodes, edges


def _views(graph: GradGraph) -> list[dict]:
    """Depth 0, 1, the first view's depth, and depth 1 with one folded module opened."""
    views: list[dict] = [{"depth": 0}, {"depth": 1}, {"depth": graph.auto_depth(40)}]
    folded = [n.module for n in graph.view(1).nodes if n.kind == "module"]
    if folded:
        views.append({"depth": 1, "expand": [folded[len(folded) // 2]]})
    return views


def _bert() -> tuple[nn.Module, torch.Tensor, object]:
    from transformers import BertModel

    torch.manual_seed(0)
    net = BertModel(tiny_bert_config(), add_pooling_layer=False).eval()
    return net, torch.randint(0, 64, (2, 8)), lambda out: out.last_hidden_state.pow(2).mean()


def _models() -> dict[str, tuple[nn.Module, torch.Tensor, object]]:
    built = {name: (m, x, None) for name, (m, x, _) in zoo("tiny").items()}
    net, x, _ = dead_branch_example()
    return {**built, "dead_branch": (net, x, None)}


@pytest.mark.parametrize("name", [*ZOO_NAMES, "dead_branch", "hf_bert"])
def test_a_view_reads_as_after_measuring_everything(name: str) -> None:
    net, x, loss = _bert() if name == "hf_bert" else _models()[name]
    ex = GradExplorer(net, x, loss_fn=loss)
    full = ex.graph
    skipped = 0
    for view in _views(full):
        ex.run(view=view)
        part = ex.graph
        skipped += unmeasured(part)[1]
        depth, rest = view["depth"], {k: v for k, v in view.items() if k != "depth"}
        for group in (None, False):
            assert _drawn(part.view(depth, group=group, **rest)) == _drawn(
                full.view(depth, group=group, **rest)
            ), (name, view, group)
        assert part.view(depth, **rest) == part.view(depth, **rest)
        assert drawn_measured(part.view(depth, **rest))
        assert ex.report.param_norms == pytest.approx(
            GradExplorer(net, x, loss_fn=loss).report.param_norms, rel=0, abs=0
        )
    if name not in ("mlp3", "dead_branch"):  # folding leaves these nothing to skip
        assert skipped > 0, name


def test_what_was_not_measured_says_so_and_exports_measure_it(tmp_path) -> None:
    net, x, loss = _bert()
    ex = GradExplorer(net, x, loss_fn=loss)
    ex.run(view={"depth": 0})  # nothing to take the view of yet: everything
    assert unmeasured(ex.graph) == (0, 0)
    ex.run(view={"depth": 0})
    part = ex.graph
    nodes, edges = unmeasured(part)
    assert nodes > 0 and edges > 0
    deep = part.view(None)
    assert not drawn_measured(deep)
    dot = render_dot(deep).dot
    assert "‖g‖ not measured" in dot and 'label="?"' in dot
    # a folded module holding some of what was not measured is not measured either, and
    # prints no number of something else (it had printed its largest parameter's norm)
    boxes = [n for n in part.view(2).nodes if n.kind == "module" and not n.measured]
    assert boxes and all(n.grad_norm is None and n.grad_out is None for n in boxes)
    assert all(e.grad_norm is None for e in part.edges if not e.measured)
    # "unmeasured", never "none" (no gradient flowed): a filter on "none" finds no gap here
    for view in (part, deep, part.view(2), part.view(1, group=True)):
        assert {n.status for n in view.nodes if not n.measured} <= {"unmeasured"}
        assert {e.status for e in view.edges if not e.measured} == {"unmeasured"}
        assert all(n.measured for n in view.nodes if n.status == "none")
    runs = len(ex.history)
    doc = json.loads(ex.export_json(tmp_path / "r.json").read_text())
    assert len(ex.history) == runs + 1  # the export ran again, in full
    assert all(e["measured"] for e in doc["graph"]["edges"])
    assert all(n["measured"] for n in doc["graph"]["nodes"])


def test_edges_the_previous_graph_did_not_have_are_measured() -> None:
    class Switch(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
            self.use_b = False

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.a(x)
            return (self.b(h) if self.use_b else h).tanh().sum()

    torch.manual_seed(0)
    net, x = Switch(), torch.randn(3, 4)
    ex = GradExplorer(net, x, loss_fn=lambda out: out)
    assert ex.graph.nodes  # the first run: the graph a view is taken of
    net.use_b = True  # another path than the graph the view was taken of
    ex.run(view={"depth": 0})
    full = GradExplorer(net, x, loss_fn=lambda out: out).graph
    assert _drawn(ex.graph.view(0)) == _drawn(full.view(0))
    new = {n.id for n in ex.graph.nodes if n.module == "b"}
    assert new and all(n.measured for n in ex.graph.nodes if n.id in new)
    assert all(e.measured for e in ex.graph.edges if {e.src, e.dst} & new)
    assert not all(n.measured for n in ex.graph.nodes if n.module == "a")


def test_a_wrong_view_is_a_grad_explorer_error() -> None:
    from gradviz_widgets import GradExplorerError

    net, x, _ = dead_branch_example()
    ex = GradExplorer(net, x)
    assert ex.graph.nodes  # the first run: the graph a view is taken of
    with pytest.raises(GradExplorerError, match="view takes"):
        ex.run(view={"deep": 1})
    with pytest.raises(GradExplorerError, match="depth"):
        ex.run(view={"depth": "1"})


def test_without_flow_tracking_the_flow_reads_not_measured() -> None:
    """`track_flow=False`: no edge between ops is measured, and none says "none" (no gradient)
    for it; a view changes nothing, and the widget never re-runs to measure it."""
    net, x, _ = dead_branch_example()
    ex = GradExplorer(net, x, track_flow=False)
    ops = [n for n in ex.graph.nodes if n.kind == "op"]
    assert ops and not any(n.measured for n in ops)
    assert all(not e.measured for e in ex.graph.edges if e.grad_norm is None)
    assert all(n.measured for n in ex.graph.nodes if n.kind in ("param", "input", "output"))
    ex.run(view={"depth": 0})
    assert unmeasured(ex.graph)[0] == len(ops)
    w = ex.show()
    runs = len(ex.history)
    w._set_depth(0)
    w._set_depth("full")
    assert len(ex.history) == runs


def test_a_zero_or_nan_gradient_runs_again_measuring_every_edge() -> None:
    """Where zeros or NaN began is found along every edge: a view's run that finds a zero or
    NaN/Inf gradient runs again in full, so origins read as in a full run."""
    net, x, _ = dead_branch_example()  # gate.weight / gate.bias: exactly 0.0
    ex = GradExplorer(net, x)
    full = ex.report
    ex.run(view={"depth": 0})
    assert unmeasured(ex.graph) == (0, 0)
    assert ex.report.zero_origins == full.zero_origins and full.zero_origins

    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
            self.head = nn.Linear(3, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.inner(x).sqrt())  # sqrt(0): an infinite gradient

    torch.manual_seed(0)
    model, inputs = Root(), torch.randn(4, 3)
    ex = GradExplorer(model, inputs)
    origin = ex.report.nonfinite_origin
    ex.run(view={"depth": 0})
    assert unmeasured(ex.graph) == (0, 0)
    assert ex.report.nonfinite_origin == origin and origin is not None


def test_after_a_run_that_found_zeros_a_view_runs_once_in_full() -> None:
    """A view's run that finds a zero gradient runs again in full; the next click, on the same
    model, goes straight to the full run (it would only find the zeros again: a deep chain's
    vanishing layers made every click cost two runs)."""
    torch.manual_seed(0)
    net = nn.Sequential(*[nn.Linear(4, 4) for _ in range(3)], nn.ReLU(), nn.Linear(4, 1))
    with torch.no_grad():
        net[2].bias.fill_(-100.0)  # every ReLU off: the layers below get exactly 0.0
    ex = GradExplorer(net, torch.randn(5, 4))
    view = {"depth": 0, "collapse": ["0"]}
    ex.run(view=view)  # no graph yet: a full run, which finds the zeros
    with stage_times() as clock:
        ex.run(view=view)  # the zeros again: one full run, not a view's run and a full one
    assert clock.runs == 1 and unmeasured(ex.graph) == (0, 0) and ex.report.zero_origins
    with torch.no_grad():
        net[2].bias.fill_(0.0)
    with stage_times() as clock:
        ex.run(view=view)  # full still (the newest run found zeros); it finds none
    assert clock.runs == 1 and not ex.report.zero_origins
    with stage_times() as clock:
        ex.run(view=view)
    assert clock.runs == 1 and unmeasured(ex.graph) != (0, 0)
    with torch.no_grad():
        net[2].bias.fill_(-100.0)
    with stage_times() as clock:
        ex.run(view=view)  # a view's run that finds zeros anew runs again in full
    assert clock.runs == 2 and unmeasured(ex.graph) == (0, 0)


@pytest.mark.parametrize("name", ["resnet18", "bert_like", "unrolled_lstm"])
def test_a_view_with_hooks_and_a_modifier_reads_as_a_full_run(name: str) -> None:
    """A module's full backward hook and a modifier put hook nodes between ops (what leaves
    them is measured apart): a view of a run that measured only it still reads as in full."""
    net, x, _ = zoo("tiny", [name])[name]
    paths = [p for p, _ in net.named_modules() if p]
    ex, ref = GradExplorer(net, x), GradExplorer(net, x)
    for explorer in (ex, ref):
        explorer.set_hook(paths[len(paths) // 2], "backward")
        explorer.set_modifier(paths[len(paths) // 3], scale=0.5)
    full = ref.graph
    assert ex.graph.nodes
    for view in _views(full):
        ex.run(view=view)
        depth, rest = view["depth"], {k: v for k, v in view.items() if k != "depth"}
        assert _drawn(ex.graph.view(depth, **rest)) == _drawn(full.view(depth, **rest)), view


def test_a_view_that_draws_everything_runs_once_whatever_it_finds(monkeypatch) -> None:
    """The quickstart's first view draws every node, and its gate's gradient is exactly zero:
    a click runs once (running again in full would double every click's cost)."""
    from gradviz_widgets.explorer import session

    net, x, _ = dead_branch_example()
    ex = GradExplorer(net, x)
    view = ex.show().measure_view()
    runs: list[object] = []
    real = session.run
    monkeypatch.setattr(session, "run", lambda *a, **k: runs.append(a) or real(*a, **k))
    ex.run(view=view)
    assert len(runs) == 1 and ex.report.zero_origins
