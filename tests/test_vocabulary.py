"""One vocabulary (vocabulary.py): statuses, thresholds, styles, number text; every surface
takes its colours and words from it, and a node's label and tooltip show the same norm."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

from gradviz_widgets import (
    render,  # the old names, still importable from the package
    vocabulary,
)
from gradviz_widgets.graph.grad_graph import GradGraph
from gradviz_widgets.graph.nodes import GradEdge, GradNode
from gradviz_widgets.render import chart, page_chart
from gradviz_widgets.render.page import views
from gradviz_widgets.vocabulary import (
    SEVERITY,
    STATUSES,
    STYLES,
    Thresholds,
    classify,
    format_norm,
    strongest_flow,
    style,
    worst,
)

JS = Path(__file__).resolve().parents[1] / "js"


def test_every_status_has_one_style_and_a_severity() -> None:
    assert set(STYLES) == set(STATUSES) == set(SEVERITY)
    assert list(STATUSES) == ["none", "zero", "vanishing", "healthy", "exploding", "nonfinite"]
    # told apart without colour: no two statuses share line style and pattern
    looks = {(s.dash, s.pattern) for s in STYLES.values()}
    assert len(looks) == len(STYLES)
    assert all(s.status == k for k, s in STYLES.items())
    assert style("no such status") is STYLES["none"]


def test_old_names_are_the_same_objects_or_values() -> None:
    assert render.format_norm is format_norm and render.plain_text is vocabulary.plain_text
    assert render.STATUS_STYLE["nonfinite"] == ("#f6cdb8", "#d55e00", "bold,dashed", "NaN / Inf")
    assert list(render.STATUS_STYLE) == list(vocabulary.LEGEND_ORDER)
    assert {k: s.pattern for k, s in STYLES.items()} == chart.PATTERNS
    assert render.legend() == vocabulary.legend()


@pytest.mark.parametrize(
    ("norm", "max_abs", "status"),
    [
        (None, None, "none"),
        (0.0, 0.0, "zero"),
        (1e-30, 0.0, "zero"),
        (1e-9, 1e-9, "vanishing"),
        (1.0, 0.5, "healthy"),
        (1e5, 10.0, "exploding"),
        (math.nan, None, "nonfinite"),
        (1.0, math.inf, "nonfinite"),
    ],
)
def test_classify(norm, max_abs, status) -> None:
    assert classify(norm, max_abs, Thresholds()) == status


def test_thresholds_refuse_a_bad_order() -> None:
    with pytest.raises(ValueError):
        Thresholds(vanishing=1.0, exploding=0.5)


def test_severity_and_flow() -> None:
    assert worst(["healthy", "vanishing", "zero"]) == "zero"
    assert worst(["none", "healthy"]) == "healthy" and worst([]) == "none"
    assert strongest_flow(["zero", "vanishing", "healthy"]) == "healthy"
    assert strongest_flow(["none"]) is None


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "None"),
        (0.0, "0.0"),
        (math.nan, "NaN"),
        (math.inf, "Inf"),
        (1234.5, "1234"),
        (1.5e-07, "1.5e-07"),
        (0.27901, "0.279"),
        (12345.0, "1.23e+04"),
    ],
)
def test_format_norm(value, text) -> None:
    assert format_norm(value) == text


def test_every_node_sends_its_status_words_to_the_js() -> None:
    """The pane's JS keeps no copy of the words (tests/test_status_rules.py): each node's
    info carries them, for every status."""
    from gradviz_widgets.render.dot import node_texts

    for status, s in STYLES.items():
        node = GradNode(id="n", op="MulBackward0", kind="op", module="", label="n", status=status)
        assert node_texts(node)["status_text"] == s.words


def test_static_page_chart_uses_the_styles() -> None:
    svg = page_chart.chart_svg(
        [{"name": "w", "norm": None, "status": "none"}, {"name": "z", "norm": 0, "status": "zero"}],
        Thresholds(),
    )
    assert STYLES["none"].svg_dash in svg and STYLES["zero"].svg_dash in svg
    assert STYLES["none"].label in svg and STYLES["zero"].label in svg


def _graph(norm: float) -> GradGraph:
    op = GradNode("fc/MulBackward0#0", "MulBackward0", "op", "fc", "MulBackward0", grad_norm=norm)
    out = GradNode("output", "Output", "output", "loss", "loss\n()")
    return GradGraph((op, out), (GradEdge(op.id, "output", norm),), {})


@pytest.mark.parametrize("norm", [1234.5, 1.5e-07])
def test_label_and_tooltip_show_the_same_norm(norm: float) -> None:
    node = _graph(norm).nodes[0]
    label = render.label_lines(node)[-1]
    assert label == f"‖g‖ {format_norm(norm)}"
    from gradviz_widgets.render.dot import node_info

    for info in (views(_graph(norm))[-1]["nodes"][node.id], node_info(node, hooked=False)):
        assert info["norm_text"] == label.removeprefix("‖g‖ ")  # the page and the notebook
        assert info["status_text"] == STYLES[node.status].words


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")
def test_the_page_tooltip_shows_pythons_text() -> None:
    """tooltip.js's rows for the node info the page gets: the same norm text as the label."""
    infos = [views(_graph(n))[-1]["nodes"]["fc/MulBackward0#0"] for n in (1234.5, 1.5e-07)]
    script = (
        'import { tooltipRows } from "./tooltip.js";\n'
        f"const infos = {json.dumps(infos)};\n"
        'console.log(JSON.stringify(infos.map((i) => Object.fromEntries(tooltipRows("x", i).rows)["grad norm"])));\n'
    )
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script],
        cwd=JS,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    labels = [i["label"].split("\n")[-1].removeprefix("‖g‖ ") for i in infos]
    assert shown == labels == ["1234", "1.5e-07"]


def test_chart_hover_shows_pythons_text() -> None:
    """No number formatting is left to Plotly: bar text and hover text are format_norm's."""
    from gradviz_widgets.report.grad_report import GradReport, ParamRecord

    record = ParamRecord("w", "", (2,), "float32", True, 1.5e-07, 1e-07, "vanishing")
    record = dataclasses.replace(record, norm_before=1234.5, modified_by="scale")
    report = GradReport(1.0, "sum", (record,), {}, Thresholds(), "cpu", 0.1)
    figure = chart.figure_dict(report)
    assert figure["data"][0]["text"] == ["1.5e-07"]
    assert figure["data"][1]["hovertext"] == ["1234"]
    assert not any(":." in trace["hovertemplate"] for trace in figure["data"])
