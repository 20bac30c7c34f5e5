"""Compare mode of the explorer widget without a browser: pin A, revive the quickstart's dead
gate, re-run, see B against A (grouped bars + ratio, status changes, edges coloured by B/A),
leave compare mode; the ranks line of a distributed run."""

from __future__ import annotations

import dataclasses
import re

import torch

from gradviz_widgets.render.compare_view import ONLY_B, RATIO_SCALE, ratio_legend

EDGE_COLOUR = re.compile(r' -> \w+ \[color="(#[0-9a-f]{6})"')


def revive_gate(explorer) -> None:
    with torch.no_grad():
        explorer.model.gate.bias.fill_(1.0)  # relu(gate(x)) > 0: the gate learns again


def test_pin_fix_rerun_compare_and_leave(dead_explorer):
    w = dead_explorer.show()
    normal_dot, normal_legend = w.pane.dot, list(w.pane.legend)
    w.controls.compare_button.value = True  # the toolbar's Compare: pins this run as A
    assert w.baseline is not None and w.baseline[0] is dead_explorer.report
    assert [t.name for t in w.chart.data] == ["run A", "run B", "ratio B/A"]
    assert "no status changed" in w.notes.value

    revive_gate(dead_explorer)
    assert w.rerun()
    run_a, run_b, ratio = w.chart.data
    assert run_b.type == run_a.type == "bar" and ratio.type == "scatter"
    assert w.chart.layout.barmode == "group" and w.chart.layout.yaxis2.type == "log"
    assert "Δ <b>gate.weight</b>" in run_b.x
    i = list(run_b.x).index("Δ <b>gate.weight</b>")
    assert run_b.customdata[i][4] == "0.0 → healthy" and ratio.text[i] == "0.0 → gradient"
    assert "<b>gate.weight</b> 0.0 → healthy" in w.notes.value
    assert w.notes.layout.display != "none"
    # edges by B/A: the gate's branch came back (0.0 -> gradient), the main path barely moved
    colours = set(EDGE_COLOUR.findall(w.pane.dot))
    assert RATIO_SCALE[-1][1] in colours and "#6b6b6b" in colours and ONLY_B not in colours
    assert [e["status"] for e in w.pane.legend][-len(ratio_legend()) :] == [
        e["status"] for e in ratio_legend()
    ]

    w.controls.compare_button.value = False  # leave: the normal view comes back
    assert w.baseline is None and [t.name for t in w.chart.data] == ["gradient norm"]
    assert w.pane.legend == normal_legend and w.notes.layout.display == "none"
    assert not set(EDGE_COLOUR.findall(w.pane.dot)) & {c for _, c, _ in RATIO_SCALE}
    assert w.pane.dot != normal_dot  # the revived run, drawn with status colours
    # a bar click still selects in the normal chart after compare mode
    assert w.select_param("gate.weight") == w.pane.selected


def test_python_api_baselines(dead_explorer):
    w = dead_explorer.show()
    first = dead_explorer.report
    revive_gate(dead_explorer)
    w.rerun()
    w.compare(-2)  # the run before the newest, from the runs this widget showed
    assert w.baseline[0] is first and w.controls.compare_button.value is True
    assert RATIO_SCALE[-1][1] in EDGE_COLOUR.findall(w.pane.dot)
    w.compare(first)  # a report alone: bars and ratio, edges keep status colours
    assert len(w.chart.data) == 3 and "no graph" in w.notes.value
    assert not set(EDGE_COLOUR.findall(w.pane.dot)) & {c for _, c, _ in RATIO_SCALE}
    w.end_compare()
    assert w.controls.compare_button.value is False and len(w.chart.data) == 1


def test_bad_baseline_shows_in_the_status_line(dead_explorer, monkeypatch):
    w = dead_explorer.show()
    w.compare(7)  # the Python API goes through the guard too: shown, not raised
    assert w.pane.status_level == "error" and "has shown 1 run(s)" in w.status_text
    w.compare("nonsense")
    assert "baseline must be" in w.status_text and w.baseline is None
    assert len(w.chart.data) == 1 and w.controls.compare_button.value is False
    # a failure while drawing compare mode: the normal mode stays in force, toggle included
    monkeypatch.setattr(w.compare_view, "legend", lambda: 1 / 0)
    w.controls.compare_button.value = True
    assert "ZeroDivisionError" in w.status_text and w.baseline is None
    assert w.controls.compare_button.value is False


def test_compare_bar_click_selects_the_parameter(dead_explorer):
    w = dead_explorer.show()
    w.compare()

    class Points:
        point_inds = [0]

    w.chart_view.bar_clicked(w.chart.data[0], Points(), None)
    assert w.selected == "param:main1.weight" == w.pane.selected


def test_ranks_line_names_parameters_missing_on_some_ranks(dead_explorer, monkeypatch):
    w = dead_explorer.show()
    report = dead_explorer.report
    table = {p.name: (p.status, None, p.norm) for p in report.params}
    missing = {"dead.bias": ("none", "unused on this rank", None)}
    ranked = dataclasses.replace(report, ranks={0: table, 1: {**table, **missing}})
    monkeypatch.setattr(type(dead_explorer), "report", property(lambda self: ranked))
    w.refresh()
    assert "<b>ranks</b> 2 ranks; no gradient on some ranks: dead.bias (rank 1)" in w.notes.value
    assert w.notes.layout.display != "none"


def test_compare_with_another_explorer_per_module(dead_branch):
    from torch import nn

    from gradviz_widgets import GradExplorer
    from gradviz_widgets.widget.explorer_widget import compare_with

    net, x, y = dead_branch
    before = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    before.run()
    revive_gate(before)
    after = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    try:
        w = compare_with(after, before)
        assert w.baseline[0] is before.report and w.controls.compare_button.value
        same = after.compare(before)  # the explorer's own door to the same widget
        assert same.baseline[0] is before.report and same.controls.compare_button.value
        w.controls.mode_box.value = "module"
        run_a, run_b, ratio = w.chart.data
        # the dead module was healthy before (its bias learns): only the gate changed status
        assert list(run_b.x) == ["main1", "Δ <b>gate</b>", "dead", "main2"]
        assert ratio.text[1] == "0.0 → gradient" and w.last_error is None
    finally:
        before.close()
        after.close()


def test_a_threshold_changed_after_pinning_changes_no_status_by_itself(dead_explorer):
    """From outside: after Compare, "exploding >" set to 1 listed "healthy → exploding" for
    gradients of run A that were already above 1: A was still judged by the old threshold."""
    from gradviz_widgets.vocabulary import Thresholds

    w = dead_explorer.show()
    w.controls.compare_button.value = True
    a = dead_explorer.report
    low = min(p.norm for p in a.params if p.norm)  # every non-zero gradient explodes now
    dead_explorer.thresholds = Thresholds(vanishing=1e-30, exploding=low / 2)
    assert w.rerun()
    b = dead_explorer.report
    assert any(p.status == "exploding" for p in b.params)
    assert "no status changed" in w.notes.value, w.notes.value
    run_a, run_b, _ = w.chart.data
    assert not any(str(x).startswith("Δ") for x in run_b.x)
    assert a.judged_by(b.thresholds).param_status == b.param_status
    assert a.judged_by(a.thresholds) is a


def test_a_baseline_explorer_is_measured_whole_and_says_its_modifiers():
    """From a teacher's try-out: run A came from an explorer whose widget had measured one view
    only (most edges then had no ratio) and which had a modifier on (removed since, unsaid).
    A current explorer's view-only run is run again in full; A's modifiers are named."""
    from torch import nn

    from gradviz_widgets import GradExplorer
    from gradviz_widgets.graph.measure import unmeasured
    from gradviz_widgets.widget.explorer_widget import compare_with

    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4), nn.Tanh())
    net, x = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), block, nn.Linear(4, 1)), torch.randn(5, 3)
    a, b = GradExplorer(net, x), GradExplorer(net, x)
    try:
        a.set_modifier("3", scale=0.5)
        a.run()
        a.run(view={"depth": 0})
        assert unmeasured(a.graph) != (0, 0) and not a.stale
        w = compare_with(b, a)
        assert unmeasured(a.graph) == (0, 0) and w.baseline[0] is a.report
        assert "with scale by 0.5 at 3" in w.compare_view.notes.value
        a.clear_hooks()  # stale now: A stays the run it was (often the model before a change)
        w.compare(a)
        assert w.baseline[0] is a.history[-1]
    finally:
        a.close()
        b.close()
