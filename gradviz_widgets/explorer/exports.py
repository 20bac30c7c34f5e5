"""Exports of the newest run (DOT, SVG, HTML page, CSV, JSON), mixed into GradExplorer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from ..graph.grad_graph import GradGraph
from ..report.grad_report import GradReport


class Exports:
    """The export methods; the explorer provides `graph`, `report` and `model`."""

    @property
    def graph(self) -> GradGraph:
        raise NotImplementedError

    @property
    def report(self) -> GradReport:
        raise NotImplementedError

    @property
    def model(self) -> nn.Module:
        raise NotImplementedError

    def to_dot(self, depth: int | None = None, **options: Any) -> str:
        """DOT text of the newest graph, folded to `depth` module levels (None: everything)."""
        from ..render.dot import to_dot

        graph = self.graph if depth is None else self.graph.view(depth)
        return to_dot(graph, **options)

    def export_svg(self, path: str | Path, depth: int | None = None) -> Path:
        """Write the graph as SVG with the system `dot` (the widget's button needs no binary)."""
        from ..render.dot import svg_with_dot

        return _write(path, svg_with_dot(self.to_dot(depth)))

    def export_html(self, path: str | Path, title: str | None = None) -> Path:
        """Write one self-contained interactive page of the newest run (graph with pan/zoom,
        tooltips, search and fold levels; chart linked to it; findings), offline over file://."""
        from ..render.page import page_html

        name = title or f"{type(self.model).__name__}: gradient flow"
        return _write(path, page_html(self.graph, self.report, name))

    def export_csv(self, path: str | Path) -> Path:
        """Write the per-parameter norms table as CSV."""
        from ..report.export import report_csv

        return _write(path, report_csv(self.report))

    def export_json(self, path: str | Path) -> Path:
        """Write the report and the graph (nodes, edges, norms, statuses) as JSON."""
        from ..report.export import report_json

        return _write(path, report_json(self.report, self.graph))


def _write(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
