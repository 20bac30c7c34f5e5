"""The explorer widget without a browser: traits after construction and after simulated
front-end messages (node click, scope toggle, bar click), errors shown and recovered from."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer, GradExplorerError, Thresholds
from gradviz_widgets.examples import resnet18


def click(widget, node_id):
    widget.pane._on_frontend_msg(widget.pane, {"kind": "node_click", "id": node_id}, [])


def test_traits_after_construction(dead_explorer):
    w = dead_explorer.show()
    assert w.pane.revision == 1
    cluster = next(k for k, v in w.pane.key_map.items() if v == "gate" and k.startswith("c"))
    assert f"subgraph cluster_{cluster} {{" in w.pane.dot
    assert set(w.pane.nodes) == {v for k, v in w.pane.key_map.items() if k.startswith("n")}
    assert w.pane.nodes["gate/AddmmBackward0#0"]["status"] == "zero"
    assert w.pane.nodes["param:main1.weight"]["grad_norm"] == pytest.approx(0.279, abs=5e-5)
    assert [e["status"] for e in w.pane.legend][:2] == ["healthy", "vanishing"]
    bar = w.chart.data[0]
    assert len(bar.y) == 8 and "0.0" in bar.text
    assert "exactly 0.0" in w.status_text and "gate.weight" in w.status_text
    assert w.pane.status_level == "warning"
    assert "CrossEntropyLoss" in w.controls.loss_label.value


def test_click_toggles_hook_reruns_and_updates(dead_explorer):
    w = dead_explorer.show()
    revision, runs = w.pane.revision, w.runs
    click(w, "gate/AddmmBackward0#0")
    assert dead_explorer.hooks == [("gate", "backward")]
    assert w.runs == runs + 1 and w.pane.revision == revision + 1
    assert [e.target for e in dead_explorer.events] == ["gate"]
    assert w.pane.nodes["gate/AddmmBackward0#0"]["hooked"] is True
    assert "grad_output[0]" in w.readout.value and "full backward hook" in w.readout.value
    # the selected module's bars are outlined in the chart
    widths = dict(
        zip([c[0] for c in w.chart.data[0].customdata], w.chart.data[0].marker.line.width)
    )
    assert widths["gate.weight"] == 3 and widths["main1.weight"] == 1
    click(w, "gate/AddmmBackward0#0")
    assert dead_explorer.hooks == [] and dead_explorer.events == []
    assert w.pane.nodes["gate/AddmmBackward0#0"]["hooked"] is False


def test_tensor_kind_hooks_the_node(dead_explorer):
    w = dead_explorer.show(hook_kind="tensor")
    click(w, "ReluBackward0#1")
    assert dead_explorer.hooks == [("ReluBackward0#1", "tensor")]
    assert dead_explorer.events[0].tensors["grad_output"][0].norm > 0
    click(w, "param:gate.weight")
    assert "op nodes" in w.last_error and w.pane.status_level == "error"


def test_clicking_the_loss_explains(dead_explorer):
    w = dead_explorer.show()
    click(w, "output")
    assert w.status_text.startswith("the loss is not inside") and dead_explorer.hooks == []
    assert w.pane.status_level == "info" and w.last_error is None  # a click, not a failure


def test_scope_toggle_folds_and_unfolds(dead_explorer):
    w = dead_explorer.show()
    w.pane._on_frontend_msg(w.pane, {"kind": "toggle_scope", "module": "gate"}, [])
    assert "module:gate" in w.pane.nodes and "gate/AddmmBackward0#0" not in w.pane.nodes
    w.pane._on_frontend_msg(w.pane, {"kind": "toggle_scope", "module": "gate"}, [])
    assert "gate/AddmmBackward0#0" in w.pane.nodes


def test_bar_click_selects_graph_node(dead_explorer):
    w = dead_explorer.show()
    assert w.select_param("dead.weight") == "param:dead.weight"
    assert w.pane.selected == "param:dead.weight" and w.pane.highlight == ["param:dead.weight"]
    w.toggle_scope("dead")
    assert w.select_param("dead.weight") == "module:dead"


def test_bar_click_on_a_frozen_parameter_selects_its_ghost_or_box():
    """The status line said "has no node in the graph" while the graph drew the frozen
    parameter as a ghost inside its module's box."""
    net = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    net[0].requires_grad_(False)
    w = GradExplorer(net, torch.randn(3, 4)).show()
    assert w.select_param("0.weight") == "ghost:param:0.weight" == w.pane.selected
    assert "drawn dashed" in w.status_text and "frozen" in w.status_text
    w.toggle_scope("0")
    assert w.select_param("0.weight") == "module:0"
    w.explorer.close()


def test_big_model_starts_folded_and_expands():
    ex = GradExplorer(resnet18(width=8), torch.randn(2, 3, 32, 32))
    w = ex.show(max_nodes=60)
    assert len(w.view.nodes) <= 60 < len(ex.graph.nodes)
    folded = next(n for n in w.view.nodes if n.kind == "module" and n.module.startswith("layer"))
    before = len(w.view.nodes)
    w.toggle_scope(folded.module)
    assert len(w.view.nodes) > before
    inner = next(n for n in w.view.nodes if n.module.startswith(folded.module + "."))
    click(w, inner.id)
    assert (inner.module, "backward") in ex.hooks
    assert {e.target for e in ex.events} == {inner.module}
    assert w.pane.nodes[inner.id]["hooked"] is True


def test_errors_show_and_widget_stays_usable(dead_branch):
    net, x, y = dead_branch
    ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
    w = ex.show()
    good_dot = w.pane.dot
    ex.sample_input = torch.randn(3, 7)
    assert w.rerun() is False
    assert "shapes" in w.last_error and w.pane.status_level == "error"
    assert w.pane.dot == good_dot  # the last good view stays, and the loss line says whose
    assert "the newest run failed; showing the last good run" in w.controls.loss_label.value
    ex.sample_input = x
    assert w.rerun() is True and w.last_error is None
    assert "newest run failed" not in w.controls.loss_label.value
    w.controls.device_box.value = w.controls.device_box.value  # no-op
    w.set_device("cuda:7")
    assert "not available" in w.last_error


def test_modifier_and_threshold_controls(dead_explorer):
    w = dead_explorer.show()
    w.click_node("main2/AddmmBackward0#0")
    w.controls.modifier_box.value, w.controls.modifier_value.value = "scale", 0.5
    w.apply_modifier_to_selected()
    assert dead_explorer.modifiers == {"main2": "scale by 0.5"}
    assert [t.name for t in w.chart.data] == ["gradient norm", "before modifiers"]
    w.controls.vanishing_box.value = 0.2
    assert dead_explorer.thresholds.vanishing == 0.2
    assert dead_explorer.report.param_status["main1.bias"] == "vanishing"


def test_exports_from_buttons_download_in_the_browser(dead_explorer, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    w = dead_explorer.show()
    sent = []
    w.pane.send = lambda msg, buffers=None: sent.append(msg)
    for button in w.controls.export_buttons:
        button.click()
    assert [m["kind"] for m in sent] == ["download_svg", "download", "download"]
    csv_msg, json_msg = sent[1], sent[2]
    assert csv_msg["filename"] == "grad_norms.csv" and csv_msg["mime"] == "text/csv"
    assert csv_msg["text"].count("\n") == 9
    assert json.loads(json_msg["text"])["loss"] > 0
    assert list(tmp_path.iterdir()) == []  # nothing written on the server


def test_python_exports_write_files(dead_explorer, tmp_path):
    w = dead_explorer.show(export_dir=tmp_path)
    assert w.export_csv().read_text().count("\n") == 9
    assert json.loads(w.export_json(tmp_path / "sub").read_text())["loss"] > 0
    sent = []
    w.pane.send = lambda msg, buffers=None: sent.append(msg)
    w.export_svg()
    assert sent and sent[0]["kind"] == "request_svg"
    w.pane._on_frontend_msg(
        w.pane, {"kind": "svg", "request": sent[0]["request"], "svg": "<svg></svg>"}, []
    )
    assert (tmp_path / "graph.svg").read_text() == "<svg></svg>"


def test_show_reuses_the_newest_run_and_reports_a_failing_first_run(dead_explorer):
    dead_explorer.run()
    w = dead_explorer.show()
    assert len(dead_explorer.history) == 1 and w.runs == 1
    assert w.controls.depth_box.options[2:] == (("0", 0),)  # the dead-branch net is one level deep
    failing = GradExplorer(nn.Linear(3, 2), torch.randn(2, 5))
    bad = failing.show()
    assert "shapes" in bad.last_error and bad.pane.status_level == "error"
    assert bad.view is None and bad.runs == 0
    # the chart says why it is empty (it was plotly's bare axes), and a failing ex.run() in a
    # cell says no run succeeded yet (it said "showing the last good run", of which was none)
    assert bad.chart_view.figure.layout.annotations[0].text.startswith("No run yet")
    with pytest.raises(GradExplorerError):
        failing.run()
    assert bad.last_error.endswith("; no run has succeeded yet")
    failing.sample_input = torch.randn(2, 3)
    bad.rerun()
    assert bad.last_error is None and bad.runs == 1 and len(bad.chart_view.figure.data) == 1


def test_show_reruns_when_settings_changed_since_the_newest_run(dead_explorer):
    dead_explorer.run()
    dead_explorer.set_modifier("main2", scale=0.5)
    assert dead_explorer.stale
    w = dead_explorer.show()
    assert len(dead_explorer.history) == 2 and not dead_explorer.stale
    assert dead_explorer.report.param("main1.weight").modified_by is not None
    assert w.runs == 1


class FailingBackward(torch.autograd.Function):
    """Identity forward; its backward raises ValueError while `armed` is set."""

    armed = False

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        if FailingBackward.armed:
            raise ValueError("backward exploded on purpose")
        return g


class Touchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        return FailingBackward.apply(self.lin(x)).sum()


@pytest.fixture
def touchy():
    FailingBackward.armed = False
    ex = GradExplorer(Touchy(), torch.randn(4, 3))
    yield ex
    FailingBackward.armed = False
    ex.close()


def lin_node(w):
    return next(n.id for n in w.view.nodes if n.module == "lin" and n.kind == "op")


def test_error_in_backward_shows_ends_busy_and_undoes_the_toggle(touchy):
    w = touchy.show()
    good = (w.pane.dot, w.pane.key_map, w.pane.nodes)
    FailingBackward.armed = True
    click(w, lin_node(w))
    assert "ValueError: backward exploded on purpose" in w.status_text
    assert "undone" in w.status_text and w.pane.status_level == "error"
    assert not w.guard.busy
    # Python's hooks and the page agree: the toggle was undone, the last good view stays
    assert touchy.hooks == []
    assert (w.pane.dot, w.pane.key_map, w.pane.nodes) == good
    assert not any(info["hooked"] for info in w.pane.nodes.values())
    w.controls.run_button.click()
    assert "ValueError" in w.last_error and w.pane.status_level == "error"
    FailingBackward.armed = False
    click(w, lin_node(w))
    assert touchy.hooks == [("lin", "backward")] and w.pane.status_level != "error"
    assert any(info["hooked"] for info in w.pane.nodes.values())


def test_failed_modifier_device_and_threshold_changes_are_undone(touchy):
    w = touchy.show()
    w.click_node(lin_node(w))
    FailingBackward.armed = True
    w.controls.modifier_box.value, w.controls.modifier_value.value = "scale", 0.5
    w.controls.apply_modifier.click()
    assert touchy.modifiers == {} and "ValueError" in w.last_error
    w.controls.vanishing_box.value = 1e-3
    assert touchy.thresholds.vanishing == 1e-7 and w.controls.vanishing_box.value == 1e-7
    w.controls.clear_button.click()
    assert touchy.hooks == [("lin", "backward")]  # clearing failed: the hook stays, as shown
    FailingBackward.armed = False
    w.controls.device_box.value = w.controls.device_box.value
    w.set_device("cuda:7")
    assert "not available" in w.last_error
    assert touchy.device in (None, "cpu") and w.controls.device_box.value == "cpu"


def test_rejected_inputs_revert_to_the_value_in_force(dead_explorer):
    w = dead_explorer.show()
    w.controls.vanishing_box.value = 1e9  # above the exploding threshold
    assert "vanishing < exploding" in w.last_error
    assert w.controls.vanishing_box.value == dead_explorer.thresholds.vanishing == 1e-7
    w.click_node("main2/AddmmBackward0#0")
    w.controls.modifier_box.value, w.controls.modifier_value.value = "clip_norm", -1.0
    w.controls.apply_modifier.click()
    assert "positive" in w.last_error and w.controls.modifier_value.value == 1.0
    assert dead_explorer.modifiers == {}


def test_any_exception_in_a_callback_is_shown_and_the_widget_recovers(dead_explorer, monkeypatch):
    w = dead_explorer.show()
    monkeypatch.setattr(w, "_update_chart", lambda: (_ for _ in ()).throw(KeyError("boom")))
    w.controls.mode_box.value = "module"
    assert w.pane.status_level == "error" and "KeyError" in w.status_text
    assert not w.guard.busy
    monkeypatch.undo()
    w.controls.mode_box.value = "param"
    assert len(w.chart.data[0].y) == 8
    w.controls.run_button.click()
    assert w.pane.status_level != "error" and w.last_error is None


def test_callbacks_arriving_during_a_run_are_queued_in_order(dead_explorer):
    w = dead_explorer.show()
    order = []

    def first():
        order.append("first")
        w.guard.call(lambda: order.append("second"))  # e.g. an observer fired by this action
        assert order == ["first"] and "queued" in w.status_text

    w.guard.call(first)
    assert order == ["first", "second"] and not w.guard.busy


def test_selection_clears_bar_highlight_and_counts_drawn_nodes(dead_explorer):
    w = dead_explorer.show()
    w.select_param("dead.weight")
    assert w.pane.highlight == ["param:dead.weight"]
    click(w, "main2/AddmmBackward0#0")
    assert w.pane.highlight == []
    drawn = sum(1 for k in w.pane.key_map if k.startswith("n"))
    total = sum(1 for n in dead_explorer.graph.nodes if n.kind != "accumulate")
    assert f"{drawn} of {total} nodes shown" in w.controls.loss_label.value


def test_ghosts_drawn_in_the_widget_and_a_click_hooks_nothing() -> None:
    from gradviz_widgets.examples.pathologies import frozen_and_detached_example

    model, x, _ = frozen_and_detached_example()
    ex = GradExplorer(model, x)
    w = ex.show(depth="full")
    ghosts = [i for i, n in w.pane.nodes.items() if n["kind"] == "ghost"]
    assert "ghost:param:frozen.weight" in ghosts and "ghost:param:unused.weight" in ghosts
    assert set(ghosts) <= set(w.pane.key_map.values())  # drawn and addressable
    w.click_node("ghost:param:frozen.weight")
    assert ex.hooks == [] and w.pane.status_level == "warning"
    assert "no gradient reaches it" in w.pane.status_text
    ex.close()


def test_a_click_on_a_group_of_identical_blocks_explains_itself() -> None:
    from gradviz_widgets.graph.nodes import GradNode
    from gradviz_widgets.widget.controller import explain_click

    group = GradNode(
        "group:h.0-11",
        "Block",
        "module",
        "group:h.0-11",
        "h.0–h.11 ×12 (Block)",
        grad_norm=1.0,
        grad_max=1.0,
        status="healthy",
    )
    text, level = explain_click(group)
    assert "double-click to unfold" in text and level == "info"
    op = GradNode(
        "h.0/MmBackward0#0",
        "MmBackward0",
        "op",
        "h.0",
        "MmBackward0",
        grad_norm=1.0,
        grad_max=1.0,
        status="healthy",
    )
    assert explain_click(op) is None


def test_a_rerun_with_the_same_norms_does_not_redraw_the_chart(dead_explorer, monkeypatch):
    """A second click on the same node (hook off again) reruns with the same norms and the same
    selection: the chart is not sent again (thousands of bars on a deep model); a change of
    what it shows (new thresholds) is."""
    w = dead_explorer.show()
    click(w, "gate/AddmmBackward0#0")
    updates = []
    real = w.chart.batch_update
    monkeypatch.setattr(w.chart, "batch_update", lambda: updates.append(1) or real())
    runs = w.runs
    click(w, "gate/AddmmBackward0#0")
    click(w, "gate/AddmmBackward0#0")
    assert w.runs == runs + 2 and updates == []
    dead_explorer.thresholds = Thresholds(vanishing=1e-2)
    w.rerun()
    assert updates  # redrawn (the explorer tells the change, then the run)


def test_the_readout_says_why_a_hooked_frozen_module_saw_nothing():
    """A click on a frozen stem whose input needs no gradient: its hook is on, the module ran,
    and no gradient reached it; the readout says that, not 'hook off'."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 2))
    for p in net[0].parameters():
        p.requires_grad_(False)
    ex = GradExplorer(net, torch.randn(2, 3, 8, 8))
    w = ex.show()
    w.selected, w.selected_module = "ghost:param:0.weight", "0"  # a click on the stem
    ex.set_hook("0", "backward")
    ex.run()
    assert ("0", "backward") in ex.hooks and not ex.events
    text = w.readout.value
    assert "no gradient flowed through it" in text and "frozen" in text, text
    assert "hook off" not in text


def test_the_root_modules_readout_says_why_it_is_quiet():
    """A root-level op (a tanh in the model's own forward) belongs to the root module "": its
    readout read "(root): no hook events in the newest run ()." with the reason left out."""

    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.tanh(x * 2.0))

    torch.manual_seed(0)
    ex = GradExplorer(Root(), torch.randn(3, 4, requires_grad=True))
    w = ex.show(depth="full")
    root_op = next(n.id for n in w.view.nodes if n.kind == "op" and n.module == "")
    w.click_node(root_op)  # hook on the root module
    w.click_node(root_op)  # and off again
    assert ex.hooks == []
    assert "(root)" in w.readout.value and "(its hook is off)" in w.readout.value, w.readout.value
