"""The widget's re-runs measure the flow its view draws, and only that (issue 21: a click
re-runs the model, and measuring every edge of a ResNet-50 cost ~10 % of its step); a view
that draws what the newest run did not measure runs again for that view before it is drawn."""

from __future__ import annotations

import pytest
import torch

from gradviz_widgets import GradExplorer, GradExplorerError
from gradviz_widgets.examples.zoo import zoo
from gradviz_widgets.graph.measure import drawn_measured, unmeasured


def _explorer() -> GradExplorer:
    net, x, _ = zoo("tiny", ["resnet18"])["resnet18"]
    return GradExplorer(net, x)


def test_a_click_measures_the_view_and_unfolding_measures_more() -> None:
    ex = _explorer()
    w = ex.show(depth=1)
    assert unmeasured(ex.graph) == (0, 0)  # the first run: nothing to take a view of yet
    w.rerun()
    assert unmeasured(ex.graph)[1] > 0 and drawn_measured(w.view)
    runs = len(ex.history)
    assert any(n.kind == "module" and n.module == "layer2.0" for n in w.view.nodes)
    w.toggle_scope("layer2.0")  # unfold a block: its inside was not measured
    assert len(ex.history) == runs + 1 and drawn_measured(w.view)
    assert any(n.module.startswith("layer2.0.") for n in w.view.nodes)
    assert unmeasured(ex.graph) == (0, 0)  # in full: the next unfolds need no run
    w._set_depth("full")
    assert len(ex.history) == runs + 1 and drawn_measured(w.view)


def test_flow_all_measures_every_edge_at_every_click() -> None:
    ex = _explorer()
    w = ex.show(depth=1, flow="all")
    w.rerun()
    assert unmeasured(ex.graph) == (0, 0) and w.measure_view() is None
    with pytest.raises(GradExplorerError, match="flow must be one of"):
        ex.show(flow="some")


def test_a_run_another_widget_made_is_drawn_not_answered() -> None:
    ex = _explorer()
    narrow, wide = ex.show(depth=0), ex.show(depth="full")
    narrow.rerun()  # measures depth 0's flow only
    runs = len(ex.history)
    assert not drawn_measured(wide.view)  # drawn as "not measured", not re-run back and forth
    assert wide.pane.status_text.startswith("the newest run measured the flow another view draws")
    assert "press Run" in wide.pane.status_text
    assert len(ex.history) == runs
    wide.rerun()  # its own run measures its own view
    assert drawn_measured(wide.view) and unmeasured(ex.graph) == (0, 0)
    torch.testing.assert_close(
        ex.report.param_norms,
        GradExplorer(*zoo("tiny", ["resnet18"])["resnet18"][:2]).report.param_norms,
    )


def test_compare_gives_no_ratio_to_an_edge_run_a_did_not_measure() -> None:
    """Run A pinned after a click measured its folded view only: the edges inside a block
    unfolded afterwards were called "edge only in B" (light grey); they keep their own look,
    and the notes line says why."""
    from gradviz_widgets.render.compare_view import ONLY_B
    from gradviz_widgets.widget.compare import A_UNMEASURED

    ex = _explorer()
    w = ex.show(depth=1)
    w.rerun()  # A: the folded view's flow only
    w.compare()  # pins the newest run as A
    w.toggle_scope("layer2.0")  # B: a run in full, layer2.0 unfolded
    a_view = w.compare_view.baseline[1].view(1, w.expand, w.collapse)  # A folded as B is
    inside = {(e.src, e.dst) for e in a_view.edges if not e.measured}
    colours = w.compare_view.edge_colors(w.view, 1, w.expand, w.collapse)
    assert inside and colours is not None
    drawn = {(e.src, e.dst) for e in w.view.edges}
    assert not (inside & drawn & set(colours))  # no ratio, no "only in B"
    assert ONLY_B not in {colours[k] for k in drawn & inside if k in colours}
    assert any(k in inside for k in drawn)  # the case is there: A left some unmeasured
    assert A_UNMEASURED.strip("()") in w.notes.value
