"""Chart data and exports: every parameter gets a row; None, 0.0 and NaN stay distinct."""

from __future__ import annotations

import csv
import io
import json
import math

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import frozen_and_detached_example, nan_mid_graph_example
from gradviz_widgets.render.chart import bar_rows, figure_dict
from gradviz_widgets.report.export import report_csv, report_json


def test_chart_has_a_bar_per_parameter_with_zero_pinned(dead_explorer):
    fig = figure_dict(dead_explorer.report)
    bar = fig["data"][0]
    assert len(bar["y"]) == 8
    texts = dict(zip([c[0] for c in bar["customdata"]], bar["text"]))
    assert texts["gate.weight"] == "0.0" and texts["main1.weight"] == "0.279"
    lo, hi = fig["layout"]["yaxis"]["range"]
    zero_y = bar["y"][[c[0] for c in bar["customdata"]].index("gate.weight")]
    assert 10**lo < zero_y < 1e-7  # pinned to the floor, visible, below the vanishing line
    patterns = dict(zip([c[0] for c in bar["customdata"]], bar["marker"]["pattern"]["shape"]))
    assert patterns["gate.weight"] == "x" and patterns["main1.weight"] == ""


def test_none_and_nan_are_distinct_bars():
    net, x, y = frozen_and_detached_example()
    ex = GradExplorer(net, x, loss_fn=__import__("torch").nn.CrossEntropyLoss(), target=y)
    rows = bar_rows(ex.report)
    assert {r["status"] for r in rows} >= {"none", "healthy"}
    fig = figure_dict(ex.report)
    none_text = [
        t for t, c in zip(fig["data"][0]["text"], fig["data"][0]["customdata"]) if c[2] == "none"
    ]
    assert none_text and set(none_text) == {"None"}
    model, xs = nan_mid_graph_example()[:2]
    fig = figure_dict(GradExplorer(model, xs).report)
    assert "NaN" in fig["data"][0]["text"]


def test_module_mode_aggregates(dead_explorer):
    rows = {r["name"]: r for r in bar_rows(dead_explorer.report, "module")}
    assert rows["gate"]["status"] == "zero"
    w, b = (
        dead_explorer.report.param_norms["main1.weight"],
        dead_explorer.report.param_norms["main1.bias"],
    )
    assert math.isclose(rows["main1"]["norm"], math.hypot(w, b))


def test_modifier_adds_before_trace(dead_explorer):
    dead_explorer.set_modifier("main2", scale=0.5)
    report = dead_explorer.run()
    fig = figure_dict(report)
    assert [t["name"] for t in fig["data"]] == ["gradient norm", "before modifiers"]
    # outlines on the bars the modifier changed only (the others drew dark stubs at the floor)
    widths = fig["data"][1]["marker"]["line"]["width"]
    changed = [p.norm_before is not None for p in report.params]
    assert any(changed) and not all(changed)
    assert widths == [1.5 if c else 0 for c in changed]


def test_csv_and_json_exports(dead_explorer, tmp_path):
    rows = list(csv.DictReader(io.StringIO(report_csv(dead_explorer.report))))
    by = {r["name"]: r for r in rows}
    assert len(rows) == 8 and by["gate.weight"]["status"] == "zero"
    assert round(float(by["main1.weight"]["norm"]), 4) == 0.279
    doc = json.loads(report_json(dead_explorer.report, dead_explorer.graph))
    assert doc["params"][2]["name"] == "gate.weight" and doc["params"][2]["norm"] == 0.0
    assert any(n["id"] == "param:gate.weight" for n in doc["graph"]["nodes"])
    assert dead_explorer.export_csv(tmp_path / "n.csv").read_text().startswith("name,module")
