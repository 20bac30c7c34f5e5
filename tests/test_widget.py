"""The explorer widget without a browser: traits after construction and after simulated
front-end messages (node click, scope toggle, bar click), errors shown and recovered from."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import resnet18


def click(widget, node_id):
    widget.pane._on_frontend_msg(widget.pane, {"kind": "node_click", "id": node_id}, [])


def test_traits_after_construction(dead_explorer):
    w = dead_explorer.show()
    assert w.pane.revision == 1 and 'subgraph "cluster_gate"' in w.pane.dot
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
    widths = dict(zip([c[0] for c in w.chart.data[0].customdata], w.chart.data[0].marker.line.width))
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
    assert "loss" in w.last_error and dead_explorer.hooks == []


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
    assert w.pane.dot == good_dot  # the last good view stays
    ex.sample_input = x
    assert w.rerun() is True and w.last_error is None
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


def test_exports_from_buttons(dead_explorer, tmp_path):
    w = dead_explorer.show(export_dir=tmp_path)
    w.controls.export_buttons[1].click()
    w.controls.export_buttons[2].click()
    assert (tmp_path / "grad_norms.csv").read_text().count("\n") == 9
    assert json.loads((tmp_path / "grad_report.json").read_text())["loss"] > 0
    sent = []
    w.pane.send = lambda msg: sent.append(msg)
    w.controls.export_buttons[0].click()
    assert sent and sent[0]["kind"] == "request_svg"
    w.pane._on_frontend_msg(w.pane, {"kind": "svg", "request": sent[0]["request"],
                                     "svg": "<svg></svg>"}, [])
    assert (tmp_path / "graph.svg").read_text() == "<svg></svg>"


def test_show_reuses_the_newest_run_and_reports_a_failing_first_run(dead_explorer):
    dead_explorer.run()
    w = dead_explorer.show()
    assert len(dead_explorer.history) == 1 and w.runs == 1
    assert w.controls.depth_box.options[2:] == (("0", 0),)  # the dead-branch net is one level deep
    bad = GradExplorer(nn.Linear(3, 2), torch.randn(2, 5)).show()
    assert "shapes" in bad.last_error and bad.pane.status_level == "error"
    assert bad.view is None and bad.runs == 0


def test_show_reruns_when_settings_changed_since_the_newest_run(dead_explorer):
    dead_explorer.run()
    dead_explorer.set_modifier("main2", scale=0.5)
    assert dead_explorer.stale
    w = dead_explorer.show()
    assert len(dead_explorer.history) == 2 and not dead_explorer.stale
    assert dead_explorer.report.param("main1.weight").modified_by is not None
    assert w.runs == 1
