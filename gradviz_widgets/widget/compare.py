"""Compare mode of the explorer widget: its state, a part of ExplorerWidget.

Pin a run as the baseline A (the toolbar's Compare toggle, or `widget.compare()`); every later
run (after a fix, on another device, with autocast, with another seed) is B. While comparing,
the chart shows A and B as grouped bars with the ratio B/A, the graph colours each edge by B's
gradient norm over A's (edges matched by their stable ids) and the line under the toolbar lists
the statuses that changed. `widget.end_compare()` (or the toggle) restores the normal view.
"""

from __future__ import annotations

from typing import Any

import ipywidgets as W

from ..errors import GradExplorerError
from ..graph.grad_graph import GradGraph
from ..graph.measure import unmeasured
from ..render.compare_view import compare_html, edge_colors, ratio_legend
from ..report.grad_report import GradReport
from ..vocabulary import html_text, legend
from .controller import ranks_html

#: the notes line when run A measured one view's flow only (a click's re-run)
A_UNMEASURED = (
    "(run A measured the flow of the view it was drawn in: edges it did not measure have no "
    "ratio and keep their own look)"
)

#: what `compare(baseline=...)` takes
Baseline = Any  # GradReport | GradExplorer | (GradReport, GradGraph | None) | int | None


class CompareView:
    """Owns compare mode's state: run A (`baseline`, None outside compare mode), the last few
    runs shown (for `baseline=-2`) and the notes line under the toolbar (compare summary, ranks).

    Example:
        >>> view = CompareView()
        >>> view.baseline is None, view.legend() == legend()
        (True, True)
    """

    def __init__(self) -> None:
        self.baseline: tuple[GradReport, GradGraph | None] | None = None
        #: the labels of A's and B's explorers (`GradExplorer.label`), when they have one
        self.names: tuple[str | None, str | None] = (None, None)
        self.recent: list[tuple[GradReport, GradGraph]] = []  # runs shown, newest last
        self.notes = W.HTML(layout=W.Layout(display="none"))

    def resolve(
        self, baseline: Baseline, report: GradReport, graph: GradGraph
    ) -> tuple[GradReport, GradGraph | None]:
        """Run A for `baseline` (see `ExplorerWidget.compare`); `report` and `graph` are the
        newest run's (A for None)."""
        if baseline is None:
            return (report, graph)
        if isinstance(baseline, GradReport):
            return (baseline, None)
        if isinstance(baseline, int) and not isinstance(baseline, bool):
            try:
                return self.recent[baseline]
            except IndexError:
                raise IndexError(
                    f"baseline {baseline}: this widget has shown {len(self.recent)} run(s)"
                ) from None
        if isinstance(baseline, tuple) and len(baseline) == 2:
            return (baseline[0], baseline[1])
        if hasattr(type(baseline), "report") and hasattr(type(baseline), "graph"):  # explorer
            try:
                if not baseline.stale and unmeasured(baseline.graph) != (0, 0):
                    # its newest run measured one view only (its widget's click): the same run
                    # again, every edge measured, so that every edge B shares gets its ratio (a
                    # stale explorer keeps its run: A is often the model before a change)
                    baseline.run(ranks=False)
                return (baseline.report, baseline.graph)
            except GradExplorerError as e:  # closed, or never run
                raise GradExplorerError(f"the baseline explorer cannot be compared: {e}") from e
        raise TypeError(
            "baseline must be None, a GradReport, a GradExplorer, a (report, graph) pair or "
            f"an int, got {type(baseline).__name__}"
        )

    def remember(self, report: GradReport, graph: GradGraph) -> None:
        """Keep the last few runs shown (for `compare(baseline=-2)`)."""
        if not self.recent or self.recent[-1][0] is not report:
            self.recent.append((report, graph))
            del self.recent[:-8]

    @property
    def baseline_report(self) -> GradReport | None:
        return None if self.baseline is None else self.baseline[0]

    def edge_colors(
        self, view_b: GradGraph, depth: int | None, expand: set[str], collapse: set[str]
    ) -> dict[tuple[str, str], str] | None:
        """Edge colours by B/A for `view_b`, the view being drawn, against A folded the same
        way (None outside compare mode)."""
        if self.baseline is None or self.baseline[1] is None:
            return None
        view_a = self.baseline[1].view(depth, expand, collapse)
        return edge_colors(view_a.edges, view_b.edges)

    def legend(self) -> list[dict]:
        return legend() + (ratio_legend() if self.baseline is not None else [])

    def notes_html(self, report: GradReport) -> str:
        """The line under the toolbar for `report`: compare summary and per-rank gaps."""
        parts = []
        if self.baseline is not None:
            parts.append(compare_html(self.baseline[0], report, names=self.names))
            if self.baseline[1] is None:
                parts.append(html_text("(baseline has no graph: edges keep status colours)"))
            elif unmeasured(self.baseline[1])[1]:
                parts.append(f"<div>{html_text(A_UNMEASURED)}</div>")
        ranks = ranks_html(report)
        if ranks:
            parts.append(ranks)
        return "".join(parts)

    def show_notes(self, html: str) -> None:
        """Show `html` under the toolbar (hidden when empty)."""
        self.notes.value = html
        self.notes.layout.display = "" if html else "none"
