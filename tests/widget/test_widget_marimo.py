"""The explorer's marimo view without a browser (gradviz_widgets/widget_marimo.py): what
``ex.show()`` returns inside marimo, what the mirrored toolbar and readout describe, and that
a change sent by the page acts on the same ExplorerWidget, failures shown in its status line.
The page itself is checked in tests/ui/test_marimo_ui.py."""

from __future__ import annotations

import sys
import types

import pytest

from gradviz_widgets.widget import marimo_mirror as widget_marimo
from gradviz_widgets.widget.explorer_widget import ExplorerWidget
from gradviz_widgets.widget.marimo_mirror import Mirror, describe, in_marimo


@pytest.fixture
def shown(dead_explorer, monkeypatch):
    """``dead_explorer.show()`` as inside a marimo notebook."""
    monkeypatch.setattr(widget_marimo, "in_marimo", lambda: True)
    return dead_explorer.show()


def send(w, description, **change):
    """What the page sends when the toolbar control labelled `description` changes."""
    w.marimo.toolbar.receive({"id": w.marimo.control(description), **change})


def items(tree):
    for node in tree:
        yield node
        yield from items(node.get("children", []))


def drawn(mirror, label):
    return next(n for n in items(mirror.tree) if n.get("label") == label)


def test_detection_never_imports_marimo(monkeypatch):
    monkeypatch.delitem(sys.modules, "marimo", raising=False)
    assert in_marimo() is False and "marimo" not in sys.modules
    fake = types.ModuleType("marimo")
    fake.running_in_notebook = lambda: True  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "marimo", fake)
    assert in_marimo() is True
    fake.running_in_notebook = lambda: 1 / 0  # type: ignore[attr-defined]
    assert in_marimo() is False


def test_outside_marimo_show_is_the_plain_widget(dead_explorer):
    w = dead_explorer.show()
    assert isinstance(w, ExplorerWidget) and not hasattr(w, "marimo")
    assert "_display_" not in vars(w)


def test_in_marimo_show_is_the_same_widget_drawn_whole(shown):
    pytest.importorskip("marimo")
    from marimo._output.formatting import try_format

    assert isinstance(shown, ExplorerWidget) and shown.runs == 1
    out = try_format(shown)  # marimo's own formatter: the display hook wins over ipywidgets
    assert out.mimetype == "text/html" and out.traceback is None
    assert out.data.count("marimo-anywidget") >= 3  # toolbar, graph, chart, readout
    assert "not supported" not in out.data
    assert shown._display_() is shown._display_()  # built once


def test_the_toolbar_and_readout_are_described_as_plain_data(shown):
    tree = shown.marimo.toolbar.tree
    labels = [n.get("label") for n in items(tree) if n["kind"] != "box"]
    for label in ("device", "Run", "click hooks", "clear hooks", "fold at", "chart", "Compare"):
        assert label in labels
    assert drawn(shown.marimo.toolbar, "chart")["options"] == ["per parameter", "per module"]
    loss_line = next(n for n in items(tree) if n["kind"] == "html")
    assert "CrossEntropyLoss" in loss_line["html"]
    [readout] = shown.marimo.readout.tree
    assert readout["kind"] == "html" and "Click a node" in readout["html"]


def test_page_changes_act_on_the_widget(shown, dead_explorer):
    send(shown, "chart", index=1)
    assert shown.controls.mode_box.value == "module"
    assert drawn(shown.marimo.toolbar, "chart")["index"] == 1
    assert len(shown.chart.data[0].y) == 4  # one bar per module
    runs = shown.runs
    send(shown, "Run", click=True)
    assert shown.runs == runs + 1
    send(shown, "click hooks", index=list(shown.controls.kind_box.options).index("forward"))
    assert shown.controls.kind_box.value == "forward"
    send(shown, "vanishing <", value=1e-3)
    assert dead_explorer.thresholds.vanishing == 1e-3
    send(shown, "Compare", value=True)
    assert shown.baseline is not None and drawn(shown.marimo.toolbar, "Compare")["pressed"]


def test_a_node_click_updates_the_mirrored_readout_and_clear_hooks(shown, dead_explorer):
    shown.pane._on_frontend_msg(
        shown.pane, {"kind": "node_click", "id": "gate/AddmmBackward0#0"}, []
    )
    assert dead_explorer.hooks == [("gate", "backward")]
    assert "grad_output[0]" in shown.marimo.readout.tree[0]["html"]
    send(shown, "clear hooks", click=True)
    assert dead_explorer.hooks == []


def test_failures_show_in_the_status_line_and_the_page_shows_the_value_in_force(shown, monkeypatch):
    shown.marimo.toolbar.receive({"id": 999})
    assert shown.pane.status_level == "error" and "no control 999" in shown.status_text
    send(shown, "chart", index=5)
    assert "no option 5" in shown.status_text and shown.controls.mode_box.value == "param"
    send(shown, "exploding >", value=None)
    assert "enter a number" in shown.status_text
    revision = shown.marimo.toolbar.revision
    send(shown, "vanishing <", value=1e9)  # above the exploding threshold: rejected
    assert "vanishing < exploding" in shown.status_text
    assert drawn(shown.marimo.toolbar, "vanishing <")["value"] == 1e-7
    assert shown.marimo.toolbar.revision > revision  # the page redraws what is in force
    monkeypatch.setattr(shown, "rerun", lambda: 1 / 0)
    send(shown, "Run", click=True)
    assert "ZeroDivisionError" in shown.status_text and not shown.guard.busy
    monkeypatch.undo()
    send(shown, "Run", click=True)
    assert shown.pane.status_level != "error"


def test_python_side_changes_are_drawn_again(shown):
    shown.compare()
    assert drawn(shown.marimo.toolbar, "Compare")["pressed"] is True
    notes = [n for n in items(shown.marimo.toolbar.tree) if n["kind"] == "html"][-1]
    assert not notes["hidden"] and notes["html"]
    shown.end_compare()
    assert drawn(shown.marimo.toolbar, "Compare")["pressed"] is False


def test_labels_stay_text():
    import ipywidgets as W

    hostile = "<img src=x onerror=alert(1)>"
    menu = W.Dropdown(options=[hostile], description=hostile)
    d = describe(menu, {id(menu): 0})
    assert d["label"] == hostile and d["options"] == [hostile]  # drawn with textContent
    assert "innerHTML" not in widget_marimo.ESM.split("gvm-html")[0]
    assert Mirror([menu], None).tree[0]["kind"] == "select"


def test_the_module_loads_without_torch_and_without_marimo():
    import subprocess
    import textwrap

    script = """
    import sys
    sys.modules["torch"] = None  # every `import torch` now raises ImportError
    sys.modules["marimo"] = None
    import gradviz_widgets.widget.marimo_mirror as m
    assert m.in_marimo() is False
    """
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr


def test_compare_is_drawn_whole_in_marimo_too(dead_explorer, monkeypatch):
    monkeypatch.setattr(widget_marimo, "in_marimo", lambda: True)
    w = dead_explorer.compare()  # pins the current run as A
    assert isinstance(w, ExplorerWidget) and w.baseline is not None
    assert hasattr(w, "marimo") and "_display_" in vars(w)


def test_a_watch_in_marimo_shows_its_record_not_an_object_repr(monkeypatch):
    """marimo draws no ipywidgets: `watch.show()` printed `<WatchWidget object at 0x...>`. It
    shows a line saying what it is and the offline page of the record, names escaped."""
    pytest.importorskip("marimo")
    import html

    import torch
    from torch import nn

    from gradviz_widgets import GradWatch

    model = nn.ModuleDict({"<b>x</b>": nn.Linear(2, 1)})
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt)
    for _ in range(3):
        opt.zero_grad()
        model["<b>x</b>"](torch.randn(4, 2)).sum().backward()
        opt.step()
    monkeypatch.setattr(widget_marimo, "in_marimo", lambda: True)
    text = watch.show().text
    watch.close()
    assert "GradWatch</strong> in marimo" in text and "<iframe srcdoc=" in text
    page = html.unescape(text.split('srcdoc="', 1)[1].split('" style=', 1)[0])
    assert page.lower().startswith("<!doctype html>") and "<b>x</b>" not in page


def test_a_chart_drawn_after_a_new_width_is_drawn_at_that_width(shown):
    """marimo hands plotly's front end the messages sent while its module still loads to no
    one and draws the chart from the figure's synced state: the cell's width came first, and
    the chart stayed 440 px beside a 1,248 px graph. The synced state follows every change."""
    chart = shown.chart
    shown.pane._on_frontend_msg(shown.pane, {"kind": "resize", "cell": 1696}, [])
    assert chart.layout.width == 678
    assert chart._widget_layout["width"] == 678 and chart._widget_layout["autosize"] is False
    assert chart._widget_data == [t.to_plotly_json() for t in chart.data]
    shown.pane._on_frontend_msg(shown.pane, {"kind": "resize", "cell": 1078}, [])  # under
    assert chart._widget_layout["width"] == 1076
    shown.controls.mode_box.value = "module"  # new traces: the state has them, once each
    assert chart._widget_data == [t.to_plotly_json() for t in chart.data]
