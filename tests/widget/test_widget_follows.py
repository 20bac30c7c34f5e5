"""The widget shows the explorer's state whoever changed it (issue 20): hooks, modifiers and
thresholds changed from code, and runs made from code, reach every open widget of the explorer,
real widget objects driven without a browser. A failure while following shows in the status
line, the busy state ends and the last good view stays; a closed widget is not kept alive."""

from __future__ import annotations

import gc
import warnings
import weakref

import pytest
import torch

from gradviz_widgets import GradExplorer, Thresholds
from gradviz_widgets.widget.controller import status_line

GATE = "gate/AddmmBackward0#0"
MAIN2 = "main2/AddmmBackward0#0"


def hooked(w) -> set[str]:
    return {i for i, info in w.pane.nodes.items() if info["hooked"]}


def test_toggle_hook_from_code_then_run(dead_explorer):
    w = dead_explorer.show()
    revision, runs = w.pane.revision, w.runs
    assert dead_explorer.toggle_hook("gate") is True
    # the plan shows at once (markers, no new layout); the status says it has not run yet
    assert GATE in hooked(w) and w.pane.revision == revision
    assert "hooks on: backward at gate" in w.status_text and "ex.run()" in w.status_text
    dead_explorer.run()
    assert w.runs == runs + 1 and w.pane.revision == revision + 1
    assert GATE in hooked(w) and "ex.run()" not in w.status_text
    assert w.status_text == status_line(
        dead_explorer.report, dead_explorer.hooks, dead_explorer.modifiers
    )
    w.click_node(GATE)  # the widget's own click sees the hook code turned on: it goes off
    assert dead_explorer.hooks == [] and GATE not in hooked(w)


def test_a_hook_set_and_run_from_code_shows_its_events_with_nothing_selected(dead_explorer):
    """set_hook + ex.run() in cells: the graph marked the hook and the status named it, but the
    readout kept saying "Click a node to hook its module", the events in hand."""
    w = dead_explorer.show()
    dead_explorer.set_hook("main2", on=True)
    dead_explorer.run()
    assert w.selected is None and dead_explorer.events
    assert "Click a node" not in w.readout.value and "grad_output[0]" in w.readout.value
    assert "main2" in w.readout.value


def test_quickstart_order_set_hook_on_run_then_off(dead_explorer):
    """The quickstart: show, set_hook on + run in a cell, set_hook off in the next cell."""
    w = dead_explorer.show()
    w.click_node(GATE)
    w.click_node(GATE)  # on and off again from the page: "backward hook off at gate"
    dead_explorer.set_hook("gate", on=True)
    dead_explorer.run()
    assert GATE in hooked(w)
    w.select_param("gate.weight")  # the readout shows the gate's hook events
    assert "grad_output[0]" in w.readout.value
    dead_explorer.set_hook("gate", on=False)
    assert GATE not in hooked(w) and "backward hook" not in w.status_text
    assert "no hooks on; changed since the newest run" in w.status_text
    dead_explorer.run()
    assert not hooked(w) and "no hook events" in w.readout.value
    assert w.status_text == status_line(
        dead_explorer.report, dead_explorer.hooks, dead_explorer.modifiers
    )


def test_set_modifier_from_code(dead_explorer):
    w = dead_explorer.show()
    dead_explorer.set_modifier("main2", scale=0.5)
    assert MAIN2 in hooked(w) and "scale by 0.5 at main2" in w.status_text
    assert [t.name for t in w.chart.data] == ["gradient norm"]  # the run has not changed yet
    dead_explorer.run()
    assert [t.name for t in w.chart.data] == ["gradient norm", "before modifiers"]
    dead_explorer.set_modifier("main2")
    dead_explorer.run()
    assert MAIN2 not in hooked(w) and [t.name for t in w.chart.data] == ["gradient norm"]


def test_clear_hooks_from_code(dead_explorer):
    w = dead_explorer.show()
    w.click_node(GATE)
    dead_explorer.set_modifier("main2", clip_norm=1.0)
    assert hooked(w) >= {GATE, MAIN2}
    dead_explorer.clear_hooks()
    assert not hooked(w) and "no hooks on" in w.status_text
    dead_explorer.run()
    assert not hooked(w) and dead_explorer.events == [] and "no hook events" in w.readout.value


def test_new_thresholds_from_code(dead_explorer):
    w = dead_explorer.show()
    assert w.pane.nodes["param:main1.bias"]["status"] == "healthy"
    dead_explorer.thresholds = Thresholds(vanishing=0.2)
    assert w.controls.vanishing_box.value == 0.2  # the toolbar shows the pair in force
    assert "thresholds vanishing < 0.2, exploding > 10000; changed since" in w.status_text
    dead_explorer.run()
    assert w.pane.nodes["param:main1.bias"]["status"] == "vanishing"
    colours = dict(zip([c[0] for c in w.chart.data[0].customdata], w.chart.data[0].marker.color))
    assert colours["main1.bias"] != colours["main1.weight"]
    # the widget's own change of the thresholds goes through the explorer too
    w.controls.vanishing_box.value = 1e-7
    assert dead_explorer.thresholds.vanishing == 1e-7
    assert w.pane.nodes["param:main1.bias"]["status"] == "healthy"


def test_run_from_code_draws_the_new_run(dead_explorer):
    w = dead_explorer.show()
    w.click_node(GATE)
    assert "backward hook on at gate" in w.status_text
    before = w.pane.dot
    with torch.no_grad():
        dead_explorer.model.gate.bias.fill_(1.0)  # the gate learns again
    dead_explorer.run()
    assert w.pane.dot != before and w.pane.nodes[GATE]["status"] == "healthy"
    assert "backward hook on at gate" not in w.status_text
    assert w.status_text == status_line(
        dead_explorer.report, dead_explorer.hooks, dead_explorer.modifiers
    )
    norms = dict(zip([c[0] for c in w.chart.data[0].customdata], w.chart.data[0].y))
    assert norms["gate.weight"] == pytest.approx(dead_explorer.report.param_norms["gate.weight"])
    assert "grad_output[0]" in w.readout.value  # the gate's hook events of the new run


def test_every_open_widget_follows_a_change_made_in_another(dead_explorer):
    a, b = dead_explorer.show(), dead_explorer.show()
    runs_b = b.runs
    a.click_node(GATE)
    assert GATE in hooked(b) and b.runs == runs_b + 1 and a.runs == b.runs
    assert b.status_text == status_line(
        dead_explorer.report, dead_explorer.hooks, dead_explorer.modifiers
    )
    b.controls.clear_button.click()
    assert not hooked(a) and not hooked(b)


def test_a_failure_while_following_shows_and_the_last_good_view_stays(dead_explorer, monkeypatch):
    w = dead_explorer.show()
    good = (w.pane.dot, dict(w.pane.nodes), w.chart.data[0].y)
    monkeypatch.setattr(w.chart_view, "figure_for", lambda *a: 1 / 0)
    dead_explorer.toggle_hook("gate")
    report = dead_explorer.run()  # the user's cell is not broken by the widget
    assert report is dead_explorer.report
    assert w.pane.status_level == "error" and "ZeroDivisionError" in w.status_text
    assert not w.guard.busy
    assert w.pane.dot == good[0] and w.chart.data[0].y == good[2]
    monkeypatch.undo()
    dead_explorer.run()
    assert w.pane.status_level != "error" and GATE in hooked(w)


def test_a_closed_widget_is_let_go(dead_explorer):
    w = dead_explorer.show()
    ref = weakref.ref(w)
    w.close()
    del w
    gc.collect()
    assert ref() is None  # neither the explorer nor the widget libraries keep it alive
    dead_explorer.toggle_hook("gate")
    dead_explorer.run()
    assert dead_explorer.events[0].target == "gate"


def test_closing_the_explorer_shows_in_its_widgets(dead_branch):
    from torch import nn

    net, x, y = dead_branch
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    w = ex.show()
    dot = w.pane.dot
    ex.close()
    assert "explorer was closed" in w.status_text and w.pane.status_level == "error"
    assert w.pane.dot == dot


def test_a_failing_listener_warns_and_the_explorer_goes_on(dead_explorer):
    def broken(what: str) -> None:
        raise RuntimeError(f"listener broke on {what}")

    seen: list[str] = []
    handle = dead_explorer.on_change(broken)
    told = dead_explorer.on_change(seen.append)  # not a bound method: held until removed
    with pytest.warns(RuntimeWarning, match="listener broke on hooks"):
        assert dead_explorer.toggle_hook("gate") is True
    handle.remove()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dead_explorer.run()
        dead_explorer.thresholds = Thresholds(vanishing=1e-6)
    assert dead_explorer.hooks == [("gate", "backward")]
    assert seen == ["hooks", "run", "thresholds"]
    told.remove()
    dead_explorer.clear_hooks()
    assert seen == ["hooks", "run", "thresholds"]


def test_a_click_says_how_many_hooks_are_on_when_it_is_not_the_only_one(dead_explorer):
    w = dead_explorer.show()
    w.click_node(GATE)
    assert "backward hook on at gate;" in w.status_text
    other = next(n.id for n in w.view.nodes if n.module == "main1")
    w.click_node(other)
    assert w.status_text.startswith("backward hook on at main1 (2 hooks on);")


def test_a_run_from_code_that_raises_is_said_in_the_status_line():
    """ex.run() raising in a cell left the widget's status line on an older message (an earlier
    error, or "press Run (or call ex.run())")."""
    calls = [0]

    class Flaky(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            calls[0] += 1
            if calls[0] >= 2:
                raise RuntimeError(f"boom on call {calls[0]}")
            return self.lin(x)

    ex = GradExplorer(Flaky(), torch.ones(4, 3))
    w = ex.show()
    good = w.status_text
    for k in (2, 3):
        with pytest.raises(RuntimeError, match=f"boom on call {k}"):
            ex.run()
        assert w.status_text.startswith("ex.run() failed:")
        assert f"boom on call {k}" in w.status_text
        assert "last good run" in w.status_text and w.view is not None
    assert ex.failure is not None and good != w.status_text
    ex.close()
