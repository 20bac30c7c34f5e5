"""The data and presentation side imports no torch: a saved report re-renders without it.

A subprocess blocks torch (`sys.modules["torch"] = None`: any `import torch` raises) and then
imports vocabulary, ids, errors and every module of graph/, report/ and render/, loads a report and
graph from their JSON export and renders them to DOT and to a chart figure dict, through the
package's own `__init__` (which skips the capture side when torch is missing).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import nan_mid_graph_example
from gradviz_widgets.render.chart import figure_dict
from gradviz_widgets.render.dot import render_dot
from gradviz_widgets.report.export import load_json, report_json

PACKAGE = Path(__file__).resolve().parents[1] / "gradviz_widgets"
TORCH_FREE = ("vocabulary", "ids", "errors", "export", "graph", "report", "render")
# and every module of the torch-free packages (graph/, report/, render/)
ALSO = tuple(
    f"{package}.{path.stem}"
    for package in ("graph", "report", "render")
    for path in sorted((PACKAGE / package).glob("*.py"))
    if path.stem != "__init__"
)

SCRIPT = """
import importlib, json, sys
sys.modules["torch"] = None  # every `import torch` now raises ImportError
sys.path.insert(0, {root!r})
import gradviz_widgets
assert "GradExplorer" not in vars(gradviz_widgets)
from gradviz_widgets import GradReport, GradGraph, Thresholds
for name in {modules!r}:
    importlib.import_module("gradviz_widgets." + name)
from gradviz_widgets.report.export import load_json
from gradviz_widgets.render.dot import render_dot
from gradviz_widgets.render.chart import figure_dict
from gradviz_widgets.graph.ghosts import add_ghosts
report, graph = load_json(sys.stdin.read())
full = render_dot(add_ghosts(graph, report.none_reasons))
folded = render_dot(graph.view(depth=0))
figure = figure_dict(report)
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "torch" and sys.modules[m])
print(json.dumps({{"dot": full.dot, "keys": full.keys, "folded": folded.dot,
                  "bars": figure["data"][0]["text"], "torch": loaded}}))
"""


def run_without_torch(saved: str) -> dict:
    return run_script(SCRIPT.format(root=str(PACKAGE.parent), modules=TORCH_FREE + ALSO), saved)


def run_script(script: str, saved: str) -> dict:
    """Run `script` (which blocks torch itself) in a fresh Python with `saved` on its stdin;
    the JSON it prints."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        input=saved,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def saved(dead_explorer) -> tuple[str, object]:
    return report_json(dead_explorer.report, dead_explorer.graph), dead_explorer


def test_saved_report_renders_without_torch(saved) -> None:
    text, ex = saved
    out = run_without_torch(text)
    assert out["torch"] == []
    from gradviz_widgets.graph.ghosts import add_ghosts

    here = render_dot(add_ghosts(ex.graph, ex.report.none_reasons))
    assert out["dot"] == here.dot and out["keys"] == here.keys
    assert out["folded"] == render_dot(ex.graph.view(depth=0)).dot
    assert out["bars"] == figure_dict(ex.report)["data"][0]["text"]


def test_json_round_trip_keeps_the_report_and_graph(saved) -> None:
    text, ex = saved
    report, graph = load_json(text)
    assert report.rows() == ex.report.rows()
    assert report.thresholds == ex.report.thresholds
    assert dict(report.module_norms) == dict(ex.report.module_norms)
    assert graph is not None and graph.nodes == ex.graph.nodes
    assert graph.edges == ex.graph.edges and dict(graph.modules) == dict(ex.graph.modules)
    assert load_json(report_json(report))[1] is None


def test_nonfinite_numbers_survive_the_round_trip() -> None:
    model, xs = nan_mid_graph_example()[:2]
    ex = GradExplorer(model, xs)
    report, graph = load_json(report_json(ex.report, ex.graph))
    assert _text(report.rows()) == _text(ex.report.rows())
    assert "NaN" in figure_dict(report)["data"][0]["text"]
    assert graph is not None
    assert [n.status for n in graph.nodes] == [n.status for n in ex.graph.nodes]
    assert render_dot(graph).dot == render_dot(ex.graph).dot
    ex.close()


def _text(rows: list[dict]) -> str:
    return json.dumps(rows, sort_keys=True, default=str)
