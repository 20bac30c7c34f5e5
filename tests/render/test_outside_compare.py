"""Outside tests of compare mode: reports of different models, None / 0.0 / NaN / Inf on either
side, ratios at the ends of float64, hostile names in every text, edges of graphs that differ,
a closed explorer as baseline, and clicking a node in compare mode before leaving it."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from gradviz_widgets import GradExplorer
from gradviz_widgets.graph.nodes import GradEdge
from gradviz_widgets.render.chart_compare import compare_figure
from gradviz_widgets.render.compare_view import NO_RATIO, ONLY_B, compare_html, edge_colors
from gradviz_widgets.report.compare import compare_reports, norm_ratio
from gradviz_widgets.report.grad_report import GradReport, ParamRecord
from gradviz_widgets.vocabulary import Thresholds, classify

NAMES = [
    "<img src=x onerror=alert(1)>",
    "q\"uo'te",
    "back\\slash",
    "new\nline",
    "cr\rret",
    "bel\x07x",
    "&amp;",
    "a@b",
    "%{y}",
    "中文",
    "</script>",
    "ls\u2028x",
]
EDGE_COLOUR = re.compile(r'color="(#[0-9a-f]{6})"')


def report(norms: dict[str, float | None], module: str = "m") -> GradReport:
    """A report with these per-parameter norms (max |g| = the norm), classified as a run would."""
    th = Thresholds()
    params = tuple(
        ParamRecord(name, module, (2,), "float64", True, n, n, classify(n, n, th))
        for name, n in norms.items()
    )
    return GradReport(1.0, "sum", params, {}, th, "cpu", 0.0)


def ratio_texts(a: GradReport, b: GradReport) -> dict[str, str]:
    fig = compare_figure(a, b)
    ratio = fig["data"][2]
    names = [c[0] for c in ratio["customdata"]]
    return dict(zip(names, ratio["text"]))


def test_ratio_matrix_of_special_values() -> None:
    nan, inf = math.nan, math.inf
    assert norm_ratio(2.0, 3.0) == 1.5 and norm_ratio(0.0, 0.0) == 1.0
    assert norm_ratio(0.0, 1e-30) == inf  # a gradient came back
    assert norm_ratio(3.0, 0.0) == 0.0
    for a, b in [(None, 1.0), (1.0, None), (None, None), (nan, 1.0), (1.0, inf), (inf, inf)]:
        assert math.isnan(norm_ratio(a, b)), (a, b)
    ra = report({"none": None, "zero": 0.0, "nan": nan, "inf": inf, "ok": 1.0})
    rb = report({"none": 1.0, "zero": 1.0, "nan": 1.0, "inf": 1.0, "ok": nan})
    texts = ratio_texts(ra, rb)
    assert texts == {
        "none": "no ratio",
        "zero": "0.0 → gradient",
        "nan": "no ratio",
        "inf": "no ratio",
        "ok": "no ratio",
    }
    fig = compare_figure(ra, rb)
    assert fig["data"][2]["marker"]["color"][0] == NO_RATIO
    table = compare_reports(ra, rb)
    assert table.status_changed.all() and math.isnan(table.loc["none"].norm_a)


def test_ratios_at_1e_minus_30_and_1e38_are_exact() -> None:
    a = report({"tiny": 1e-30, "huge": 1e38, "same": 1e-30})
    b = report({"tiny": 1e38, "huge": 1e-30, "same": 1e-30})
    table = compare_reports(a, b)
    assert table.loc["tiny"].ratio == pytest.approx(1e68, rel=1e-12)
    assert table.loc["huge"].ratio == pytest.approx(1e-68, rel=1e-12)
    assert table.loc["same"].ratio == 1.0
    texts = ratio_texts(a, b)
    assert texts == {"tiny": "1e+68", "huge": "1e-68", "same": "1"}
    ratio_axis = compare_figure(a, b)["layout"]["yaxis2"]["range"]
    assert ratio_axis[0] <= -68 and ratio_axis[1] >= 68  # both diamonds inside the axis


def test_ratio_beyond_float64_is_not_shown_as_a_wrong_number() -> None:
    a = report({"up": 1e-300, "down": 1e300, "denormal": 5e-324})
    b = report({"up": 1e300, "down": 1e-300, "denormal": 1.0})
    texts = ratio_texts(a, b)
    # neither side is 0.0: "0.0 → gradient" is false, and so is a ratio of 0
    assert texts["up"] != "0.0 → gradient" and texts["denormal"] != "0.0 → gradient"
    assert texts["down"] not in ("0", "0.0")
    table = compare_reports(a, b)
    assert table.loc["down"].ratio != 0.0 and not math.isinf(table.loc["up"].ratio)


def test_reports_of_different_models_list_every_parameter() -> None:
    a = report({"enc.weight": 1.0, "shared": 2.0}, module="enc")
    b = report({"dec.weight": 3.0, "shared": 4.0}, module="dec")
    table = compare_reports(a, b)
    assert list(table.index) == ["enc.weight", "shared", "dec.weight"]
    assert table.loc["enc.weight"].status_b == "absent"
    assert table.loc["dec.weight"].status_a == "absent"
    assert math.isnan(table.loc["dec.weight"].ratio) and table.loc["shared"].ratio == 2.0
    fig = compare_figure(a, b)
    run_a, run_b, ratio = fig["data"]
    assert run_a["y"][2] is None and run_b["y"][0] is None  # no bar where a run lacks it
    assert ratio["text"][0] == "no ratio" and "absent" in run_a["text"]
    for mode in ("param", "module"):
        assert len(compare_figure(a, b, mode)["data"]) == 3
    assert "absent" in compare_html(a, b)


def test_edges_only_in_b_and_without_a_norm() -> None:
    a = [GradEdge("x", "y", 1.0), GradEdge("y", "z", None), GradEdge("only", "a", 1.0)]
    b = [GradEdge("x", "y", 1.0), GradEdge("y", "z", 2.0), GradEdge("new", "z", 1.0)]
    assert edge_colors(a, b) == {("x", "y"): "#6b6b6b", ("y", "z"): NO_RATIO, ("new", "z"): ONLY_B}


class Hostile(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.d = nn.ModuleDict({n: nn.Linear(3, 3) for n in NAMES})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.d.values():
            x = torch.relu(m(x))
        return x.sum()


def no_markup(text: str) -> None:
    for bad in ("<img", "</script", "<b>&", "\n", "\r", "\x07", "\u2028"):
        assert bad not in text.replace("<b>", "").replace("</b>", ""), (bad, text)


def test_hostile_names_in_compare_chart_and_notes() -> None:
    torch.manual_seed(0)
    net = Hostile()
    ex = GradExplorer(net, torch.randn(4, 3))
    w = ex.compare()
    with torch.no_grad():
        net.d["%{y}"].weight.zero_()
        net.d["%{y}"].bias.fill_(-5.0)  # dead from here on: statuses change below it
    assert w.rerun()
    assert [t.name for t in w.chart.data] == ["run A", "run B", "ratio B/A"]
    for trace in w.chart.data:
        axis = trace.y if trace.orientation == "h" else trace.x
        for tick in axis:
            no_markup(tick)
        shown = [c[3] for c in trace.customdata] if trace.type == "bar" else []
        shown += [c[0] for c in trace.customdata] if trace.type == "scatter" else []
        for text in shown:
            no_markup(text)
            assert "&lt;" in text or "<" not in text
    bars = w.chart.data[1]
    # the chart's 24 bars at its width lie flat, under each parameter's shortest distinct name
    ticks = list(bars.y if bars.orientation == "h" else bars.x)
    assert "Δ <b>%{y}.weight</b>" in ticks and "&lt;/script&gt;.weight" in ticks
    assert "&amp;amp;.weight" in " ".join(ticks) and "ls[U+2028]x.weight" in ticks
    notes = w.notes.value
    assert "<b>d.%{y}.weight</b> healthy → 0.0" in notes
    no_markup(notes)
    assert w.pane.status_level != "error", w.status_text
    ex.close()


def many_linears(n: int = 20) -> nn.Module:
    return nn.Sequential(*[nn.Linear(4, 4) for _ in range(n)])


def test_leaving_compare_on_a_flat_chart_removes_the_ratio_axis() -> None:
    torch.manual_seed(0)
    ex = GradExplorer(many_linears(), torch.randn(3, 4))  # 40 parameters: flat bars
    w = ex.compare()
    assert "xaxis2" in w.chart.layout and w.chart.layout.xaxis2.overlaying == "x"
    w.end_compare()
    assert [t.name for t in w.chart.data] == ["gradient norm"]
    axis = w.chart.layout.xaxis2 if "xaxis2" in w.chart.layout else None
    assert axis is None or axis.visible is False or axis.overlaying is None
    ex.close()


def test_closed_explorer_as_baseline_says_it_is_the_baseline() -> None:
    x = torch.randn(3, 4)
    old = GradExplorer(nn.Linear(4, 2), x)
    old.run()
    old.close()
    ex = GradExplorer(nn.Linear(4, 2), x)
    w = ex.show()
    w.compare(old)
    assert w.baseline is None and w.pane.status_level == "error"  # refused, and shown
    assert "baseline" in w.status_text, w.status_text
    ex.close()


def test_compare_models_that_differ_then_click_then_leave() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 3)
    a_net = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))
    b_net = nn.Sequential(
        nn.Sequential(nn.Linear(3, 3), nn.Tanh()), nn.ReLU(), nn.Linear(3, 1), nn.Linear(1, 1)
    )
    a = GradExplorer(a_net, x)
    a.run()
    b = GradExplorer(b_net, x)
    w = b.compare(a, depth=None)
    assert w.baseline is not None and w.pane.status_level != "error", w.status_text
    colours = set(EDGE_COLOUR.findall(w.pane.dot))
    assert ONLY_B in colours  # edges of the nested block and the extra layer
    w.toggle_scope("0")  # fold a module only B has: A is folded the same way, no error
    assert w.pane.status_level != "error", w.status_text
    assert any(n.id == "module:0" for n in w.view.nodes)
    node = next(n for n in w.view.nodes if n.kind == "op" and n.module == "2")
    w.click_node(node.id)
    assert ("2", "backward") in b.hooks and w.pane.status_level != "error", w.status_text
    assert [t.name for t in w.chart.data] == ["run A", "run B", "ratio B/A"]  # still comparing
    assert b.events and w.readout.value
    w.end_compare()
    assert w.baseline is None and [t.name for t in w.chart.data] == ["gradient norm"]
    assert w.selected == node.id and w.selected_module == "2" and ("2", "backward") in b.hooks
    assert not {ONLY_B, NO_RATIO} & set(EDGE_COLOUR.findall(w.pane.dot))
    a.close()
    b.close()


def test_distinct_names_keep_distinct_categories() -> None:
    a = report({"w\x80": 1.0, "w\x81": 2.0, "n\n": 3.0, "n␊": 4.0})
    ticks = compare_figure(a, a)["data"][1]["x"]
    assert len(set(ticks)) == len(ticks), ticks
