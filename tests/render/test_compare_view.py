"""Compare mode's pure data: ratio colours, edge colours (edges in one run only), status changes,
the grouped figure, and user text kept as data."""

from __future__ import annotations

import math

import pytest
from fake_report import report

from gradviz_widgets.graph.nodes import GradEdge
from gradviz_widgets.render import compare_view as cv
from gradviz_widgets.render.chart_compare import compare_figure

HOSTILE = '<img src=x onerror=alert(1)>"&amp;'


@pytest.mark.parametrize(
    ("ratio", "colour"),
    [
        (1.0, "#6b6b6b"),
        (1.9, "#6b6b6b"),
        (0.51, "#6b6b6b"),
        (3.0, "#e08214"),
        (50.0, "#b35806"),
        (math.inf, "#7f3b08"),
        (0.3, "#8073ac"),
        (0.0, "#2d004b"),
        (math.nan, cv.NO_RATIO),
    ],
)
def test_ratio_colours_diverge_from_grey(ratio: float, colour: str) -> None:
    assert cv.ratio_color(ratio) == colour


def test_every_colour_of_the_scale_is_in_the_legend() -> None:
    colours = {e["color"] for e in cv.ratio_legend()}
    assert {c for _, c, _ in cv.RATIO_SCALE} | {cv.ONLY_B, cv.NO_RATIO} == colours
    assert len(colours) == len(cv.RATIO_SCALE) + 2  # all distinct


def test_edge_map_matches_ids_and_marks_edges_of_one_run() -> None:
    a = [GradEdge("x", "y", 1.0), GradEdge("y", "z", 2.0), GradEdge("gone", "z", 1.0)]
    b = [GradEdge("x", "y", 1.0), GradEdge("y", "z", None), GradEdge("new", "z", 5.0)]
    colours = cv.edge_colors(a, b)
    assert colours == {("x", "y"): "#6b6b6b", ("y", "z"): cv.NO_RATIO, ("new", "z"): cv.ONLY_B}


def test_status_changes_and_badges() -> None:
    a = report({"gate.weight": 0.0, "fc.weight": 1.0, "fc.bias": 1.0, "old.w": 1.0})
    b = report({"gate.weight": 0.5, "fc.weight": math.nan, "fc.bias": 1.2, "new.w": None})
    changes = cv.status_changes(a, b)
    assert changes == [
        ("gate.weight", "zero", "healthy"),
        ("fc.weight", "healthy", "nonfinite"),
        ("old.w", "healthy", "absent"),
        ("new.w", "absent", "none"),
    ]
    assert [cv.badge(x, y) for _, x, y in changes][:2] == ["0.0 → healthy", "healthy → NaN/Inf"]
    html = cv.compare_html(a, b)
    assert "<b>gate.weight</b> 0.0 → healthy, " in html and "4 status change(s)" in html


def test_grouped_figure_pins_and_marks_changes() -> None:
    a = report({"gate.weight": 0.0, "fc.weight": 1.0, "fc.bias": None})
    b = report({"gate.weight": 0.5, "fc.weight": 10.0, "fc.bias": None})
    fig = compare_figure(a, b)
    run_a, run_b, ratio = fig["data"]
    assert (run_b["name"], run_a["name"], ratio["name"]) == ("run B", "run A", "ratio B/A")
    assert fig["layout"]["barmode"] == "group" and fig["layout"]["yaxis2"]["type"] == "log"
    assert ratio["yaxis"] == "y2"
    floor = run_a["y"][0]
    assert run_a["y"][2] == floor == run_b["y"][2]  # zero and None pinned to the floor
    assert run_a["marker"]["pattern"]["shape"] == ["x", "", "."]
    assert run_b["x"][0] == "Δ <b>gate.weight</b>" and run_b["x"][1] == "fc.weight"
    assert run_b["customdata"][0][4] == "0.0 → healthy"
    assert ratio["text"] == ["0.0 → gradient", "10", "no ratio"]
    assert ratio["y"][2] is None and ratio["y"][1] == pytest.approx(10.0)


def test_many_rows_lie_flat_with_the_ratio_on_a_second_x_axis() -> None:
    a = report({f"m{i}.w": 1.0 for i in range(40)})
    b = report({f"m{i}.w": 2.0 for i in range(40)})
    fig = compare_figure(a, b)
    assert fig["data"][0]["orientation"] == "h" and fig["data"][2]["xaxis"] == "x2"
    assert fig["layout"]["xaxis2"]["overlaying"] == "x"


def test_hostile_names_stay_data() -> None:
    a = report({HOSTILE: 0.0, "ok.w": 1.0})
    b = report({HOSTILE: 1.0, "ok.w": 1.0})
    html = cv.compare_html(a, b)
    assert "<img" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    fig = compare_figure(a, b)
    for trace in fig["data"]:
        assert all("<img" not in str(x) for x in trace["x"])
        assert all("<img" not in str(c) for row in trace["customdata"] for c in row[2:])
    # the raw name stays in customdata[0] (a bar click looks the parameter up by it)
    assert fig["data"][0]["customdata"][0][0] == HOSTILE
