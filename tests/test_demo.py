"""The README's headless command: a standalone page, the graph as SVG, the norms as CSV/JSON."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from gradviz_widgets.demo import _JS_DIR, main

needs_layout = pytest.mark.skipif(
    shutil.which("dot") is None and not (_JS_DIR / "node_modules" / "@viz-js" / "viz").exists(),
    reason="neither system Graphviz nor js/node_modules for WASM Graphviz")


@needs_layout
def test_headless_demo_writes_page_svg_and_tables(tmp_path, capsys):
    assert main([str(tmp_path)]) == 0
    svg = (tmp_path / "graph.svg").read_text()
    assert "<svg" in svg and "gate.weight" in svg and svg.count('class="node"') > 20
    rows = {r["name"]: r for r in csv.DictReader((tmp_path / "grad_norms.csv").open())}
    assert rows["gate.weight"]["status"] == "zero" and round(float(rows["main2.weight"]["norm"]), 4) == 0.2938
    report = json.loads((tmp_path / "grad_report.json").read_text())
    assert any("exactly 0.0" in f for f in report["findings"])
    page = (tmp_path / "index.html").read_text()
    assert "<svg" in page and "plotly" in page.lower() and "exactly 0.0" in page
    assert "index.html" in capsys.readouterr().out
