"""Compare mode of the explorer widget, as a mixin of ExplorerWidget.

Pin a run as the baseline A (the toolbar's Compare toggle, or `widget.compare()`); every later
run (after a fix, on another device, with autocast, with another seed) is B. While comparing,
the chart shows A and B as grouped bars with the ratio B/A, the graph colours each edge by B's
gradient norm over A's (edges matched by their stable ids) and the line under the toolbar lists
the statuses that changed. `widget.end_compare()` (or the toggle) restores the normal view.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from ..errors import GradExplorerError
from ..graph.grad_graph import GradGraph
from ..render.compare_view import compare_html, edge_colors, ratio_legend
from ..report.grad_report import GradReport
from ..vocabulary import html_text, legend
from .controller import ranks_html

#: what `compare(baseline=...)` takes
Baseline = Any  # GradReport | GradExplorer | (GradReport, GradGraph | None) | int | None


class CompareActions:
    """Pin a baseline, compare, end compare; the notes line (compare summary, ranks).

    Needs from the widget: explorer, controls, guard, notes, recent, baseline, refresh(),
    _set_status(), _set_quietly().
    """

    explorer: Any
    controls: Any
    guard: Any
    notes: Any
    recent: list[tuple[GradReport, GradGraph]]
    baseline: tuple[GradReport, GradGraph | None] | None
    refresh: Callable[[], None]
    _set_status: Callable[[str, str], None]
    _set_quietly: Callable[[Any, Any], None]

    def compare(self, baseline: Baseline = None) -> None:
        """Enter compare mode with `baseline` as A and the newest run as B.

        `baseline`: None (the current run: re-run after a change to see B differ), a
        GradReport (its norms; edges then stay uncoloured: a report has no graph), another
        GradExplorer (its newest run), a (report, graph) pair, or an int indexing the runs this
        widget has shown (`-2`: the run before the newest).

        Example:
            >>> w.compare(); net.gate.bias.data.fill_(1.0); w.rerun()   # doctest: +SKIP
        """
        self.guard.call(self._switch, baseline, True)

    def end_compare(self) -> None:
        """Leave compare mode: the normal chart, edge colours and legend come back."""
        self.guard.call(self._switch, None, False)

    def _compare_toggled(self, on: bool) -> None:
        self._switch(None, on)  # already under the guard (a control's observer)

    def _switch(self, baseline: Baseline, on: bool) -> None:
        """Enter (`on`) or leave compare mode; on failure the mode in force stays (the toggle
        shows it) and the guard shows the error."""
        before = self.baseline
        try:
            self.baseline = self._resolve_baseline(baseline) if on else None
            self._set_quietly(self.controls.compare_button, on)
            self.refresh()
        except Exception:
            self.baseline = before
            self._set_quietly(self.controls.compare_button, before is not None)
            with contextlib.suppress(Exception):  # best effort: the view of the mode in force
                self.refresh()
            raise

    def _resolve_baseline(self, baseline: Baseline) -> tuple[GradReport, GradGraph | None]:
        if baseline is None:
            return (self.explorer.report, self.explorer.graph)
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
                return (baseline.report, baseline.graph)
            except GradExplorerError as e:  # closed, or never run
                raise GradExplorerError(f"the baseline explorer cannot be compared: {e}") from e
        raise TypeError(
            "baseline must be None, a GradReport, a GradExplorer, a (report, graph) pair or "
            f"an int, got {type(baseline).__name__}"
        )

    def _remember(self, report: GradReport, graph: GradGraph) -> None:
        """Keep the last few runs shown (for `compare(baseline=-2)`)."""
        if not self.recent or self.recent[-1][0] is not report:
            self.recent.append((report, graph))
            del self.recent[:-8]

    def _edge_colors(
        self, view_b: GradGraph, depth: int | None, expand: set[str], collapse: set[str]
    ) -> dict[tuple[str, str], str] | None:
        """Edge colours by B/A for `view_b`, the view being drawn, against A folded the same
        way (None outside compare mode)."""
        if self.baseline is None or self.baseline[1] is None:
            return None
        view_a = self.baseline[1].view(depth, expand, collapse)
        return edge_colors(view_a.edges, view_b.edges)

    def _legend(self) -> list[dict]:
        return legend() + (ratio_legend() if self.baseline is not None else [])

    def _update_notes(self) -> None:
        """The line under the toolbar: compare summary and per-rank gaps (hidden when empty)."""
        parts = []
        if self.baseline is not None:
            parts.append(compare_html(self.baseline[0], self.explorer.report))
            if self.baseline[1] is None:
                parts.append(html_text("(baseline has no graph: edges keep status colours)"))
        ranks = ranks_html(self.explorer.report)
        if ranks:
            parts.append(ranks)
        self.notes.value = "".join(parts)
        self.notes.layout.display = "" if parts else "none"
