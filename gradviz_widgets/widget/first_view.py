"""The first view of a model: how graph and chart share the cell, and how deep the graph opens.

The page knows the sizes, Python the graph: the graph pane reports the width of the widget's
output (the cell) and, after each fresh layout or new viewport size, whether the whole graph
fitted at readable label size and how wide it is then. `FirstView` turns those reports into
the arrangement (chart beside the graph on wide cells, below it on narrow ones and under a graph
drawn for good that fits the cell's width but not the room beside the chart; both follow the
window) and, while the
fold depth is "auto", into one step more folding each time the graph did not fit: first the
leaf modules (a Linear's few ops become its box), then one level of depth at a time down to
the top-level modules (a level that draws the same view is skipped: the page would draw it
unchanged and report nothing), but never to a view of fewer than `MIN_OVERVIEW` nodes (the deeper
one opens on its readable top instead). It never unfolds by itself, so
the view cannot flap; a new arrangement or a new fold choice starts over from `auto_depth`.

The depth is chosen once, from a real size: a report measured in a pane not laid out, hidden
or detached (a cell scrolled away) is ignored, and the choice waits for the next one. Once a
run was drawn at a measured size, the depth shown stays: a re-run (the same graph, or one a
change of `requires_grad` made bigger) keeps it, whatever size its fresh layout is measured
at (only the node budget may fold a much bigger graph further). It is chosen again only when
the cell's width really changed (a new arrangement, or more than `RESIZE_SLACK` of it) while
the fold level is "auto" and nothing was folded or unfolded by hand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import Any

import ipywidgets as W

from ..graph.grad_graph import GradGraph
from ..render.readout import HINT_CLASS

SIDE_BY_SIDE_FROM = 1100  # px of cell width: narrower cells get the chart under the graph
CHART_SHARE = 0.4  # of the cell's width, beside the graph
CHART_MIN, CHART_MAX = 440, 760  # px, beside the graph
GAP = 8  # px between graph and chart
FOLD_ABOVE = 40  # drawn nodes of the default view: a smaller graph is never folded for the
# screen (it opens readable, on the top of the graph when it does not fit; the examples stay
# as they were); a larger one, once folding, folds until it fits
WIDTH_SLACK = 0.85  # a fit report from a viewport narrower than this share of the expected
# graph width was measured before the arrangement reached the page: a newer one follows
MIN_MEASURE = 48  # px: a viewport narrower or lower than this is not laid out, hidden or
# detached; the page sends no such report (js/pan_zoom.js MIN_MEASURE_PX), nor is one used
READOUT_HEIGHT = "136px"  # the hook readout above a stacked graph: a fixed box (it scrolls),
# so a click's readout shows without scrolling and never moves the graph under the pointer
# again; until a module is chosen it holds a one-line hint, and the box is that line's height
# (an empty 136 px box cost the first view a quarter of a 1280x800 screen's graph)
MIN_OVERVIEW = 8  # drawn nodes: folding for the screen never goes to a view this small (a
# whole GPT-2 as one box beside its head and loss); the deeper view opens on its readable top
RESIZE_SLACK = 0.1  # share of the cell width the depth was chosen at: a smaller change (a
# scrollbar coming and going) keeps the depth; a larger one chooses it again
HOLD_UNDER = 24  # px: a chart put under a graph for its width stays there while the cell is
# narrower than the graph by no more than this (the page's scrollbar, which the taller
# stacked widget may bring, must not move the chart back beside it)


@dataclasses.dataclass(frozen=True)
class Arrangement:
    """Chart under the graph (`stacked`) or beside it, and the chart's width in px."""

    stacked: bool
    chart_width: int

    def graph_width(self, cell: int) -> int:
        """The graph pane's expected width in a cell `cell` px wide."""
        return cell if self.stacked else cell - self.chart_width - GAP


def arrange(cell: int, across: int = 0, hold: int = 0) -> Arrangement:
    """How a cell `cell` px wide is shared (0: not known yet: the chart beside, 440 px), for a
    graph `across` px wide at readable labels (0: not known): the chart goes under a graph that
    fits the cell's width (give or take `hold` px) but not the room beside the chart.

    Example:
        >>> arrange(848), arrange(1500)
        (Arrangement(stacked=True, chart_width=846), Arrangement(stacked=False, chart_width=600))
        >>> arrange(1108, across=805), arrange(1108, across=600), arrange(1108, across=1500)
        (Arrangement(stacked=True, chart_width=1106), Arrangement(stacked=False, chart_width=443), Arrangement(stacked=False, chart_width=443))
    """
    if cell <= 0:
        return Arrangement(False, CHART_MIN)
    stacked = Arrangement(True, max(300, cell - 2))
    if cell < SIDE_BY_SIDE_FROM:
        return stacked
    beside = Arrangement(False, int(min(CHART_MAX, max(CHART_MIN, cell * CHART_SHARE))))
    return stacked if beside.graph_width(cell) < across <= cell + hold else beside


class FirstView:
    """Owns the cell width, the arrangement and the auto-fold cap of one explorer widget.

    `refresh` redraws the widget (graph, chart), `refresh_chart` the chart alone; `auto` says whether the fold depth is "auto"
    with nothing folded or unfolded by hand; `revision` is the pane's current graph revision.
    """

    def __init__(
        self,
        boxes: tuple[W.Box, W.Box, W.Box],
        refresh: Callable[[], None],
        refresh_chart: Callable[[], None],
        auto: Callable[[], bool],
        revision: Callable[[], int],
        readout: W.Widget | None = None,
    ) -> None:
        self.body, self.graph_box, self.chart_box = boxes
        self.readout = readout
        self.refresh = refresh
        self.refresh_chart = refresh_chart
        self.auto = auto
        self.revision = revision
        self.cell = 0
        self.shape = arrange(0)
        self.across = 0  # px the graph drawn for good needs across, at readable labels
        self.cap: int | None = None  # deepest fold depth the page may still show (None: any)
        self.fold_leaves = False  # leaf modules folded (the first step when it did not fit)
        self.shown: int | None = None  # the depth the auto view was last drawn at
        self.max_depth = 0
        self._last: tuple[GradGraph, frozenset[str]] | None = None  # graph, expand drawn last
        self.settling = True  # fit reports may still fold (until a measured run is re-run)
        self.measured = False  # a fit report at a real size came for this choice
        self.measured_at = 0  # the cell width then (0: not known)
        self._answered: set[int] = set()  # revisions whose measured report was used
        if readout is not None:
            readout.observe(lambda _: self._apply(), names="value")
        self._apply()

    @property
    def chart_width(self) -> int:
        return self.shape.chart_width

    def reset(self) -> None:
        """Forget the fold cap (a new fold choice, a new arrangement): choose again."""
        self.cap = None
        self.fold_leaves = False
        self.settling = True
        self.measured = False
        self.measured_at = 0
        self._answered.clear()

    def ran(self) -> None:
        """A new run is about to be drawn: once a depth was chosen at a measured size, it
        stays (the re-run's fresh layout folds no further, wherever it is measured)."""
        if self.measured:
            self.settling = False

    def auto_depth(
        self, graph: GradGraph, max_nodes: int, expand: Collection[str] = ()
    ) -> tuple[int | None, bool | None, frozenset[str]]:
        """(depth, group, folded leaves) for the auto view: `graph.auto_depth`, no deeper than
        the cap; leaf modules (none in `expand`) folded once the screen made it fold."""
        self.max_depth = graph.max_depth
        self._last = (graph, frozenset(expand))
        depth = graph.auto_depth(max_nodes)
        if self.cap is not None:
            depth = min(self.max_depth if depth is None else depth, self.cap)
        self.shown = depth
        if not self.fold_leaves:
            return depth, None, frozenset()
        # runs of blocks are grouped as by default (big views): forcing it would also merge
        # sibling leaf modules called between other ops into one fan-shaped node
        return depth, None, _leaf_modules(graph, expand)

    def _view_at(self, depth: int) -> frozenset[str]:
        """The node ids of the auto view of the graph drawn last, folded to `depth` with leaf
        modules folded (empty when there is none yet)."""
        if self._last is None:
            return frozenset()
        graph, expand = self._last
        return frozenset(
            n.id for n in graph.view(depth, expand, _leaf_modules(graph, expand)).nodes
        )

    def _next_view(self, current: int) -> tuple[int, int]:
        """(depth, nodes it draws) of the deepest depth above `current` whose view differs from
        `current`'s (0 at most; MIN_OVERVIEW nodes when no graph was drawn yet: no reason to
        stop): the page draws an unchanged view without a new layout, so no fit report would
        follow and the auto view would stay on the graph that did not fit (a CNN with frozen
        first stages draws the same nodes at depths 4 and 3, leaf modules folded)."""
        if self._last is None:
            return current - 1, MIN_OVERVIEW
        now = self._view_at(current)
        for depth in range(current - 1, 0, -1):
            view = self._view_at(depth)
            if view != now:
                return depth, len(view)
        return 0, len(self._view_at(0))

    def resized(self, cell: int) -> None:
        """The cell is `cell` px wide now: re-arrange when that changes the arrangement, and
        choose the auto depth again when its width really changed (`changed`)."""
        if cell <= 0:
            return  # hidden or detached: no size to arrange for
        self.cell = cell
        shape = self._arranged()
        if shape == self.shape and not self.changed(cell):
            return
        # the chart beside the graph follows the cell's width; only a move of the chart
        # (beside / under) or a really different width chooses the depth again
        choose = shape.stacked != self.shape.stacked or self.changed(cell)
        redraw_chart = shape != self.shape
        self.shape = shape
        self._apply()
        if choose and self.auto() and self.cap is not None:
            self.reset()  # more (or less) room: start over from the node budget
            self.refresh()
            return
        if choose and self.auto() and self.measured:
            self.settling = True  # drawn unfolded: the page's next report may fold it
            self.measured, self.measured_at = False, 0
            self._answered.clear()
        if redraw_chart:
            self.refresh_chart()

    def changed(self, cell: int) -> bool:
        """Whether the cell is really wider or narrower than where the depth was chosen."""
        return self.measured_at > 0 and abs(cell - self.measured_at) > (
            RESIZE_SLACK * self.measured_at
        )

    def fitted(self, report: dict[str, Any], drawn: int = FOLD_ABOVE + 1) -> None:
        """The page's fit report: fold one step further when the whole graph (`drawn` nodes
        now) did not fit."""
        if report["cell"] > 0 and report["cell"] != self.cell:
            self.resized(report["cell"])
        if not (self.settling and self.auto()) or report["revision"] != self.revision():
            return  # a re-run keeps the depth shown; a depth chosen by hand stays
        if min(report["width"], report["height"]) < MIN_MEASURE:
            return  # not laid out, hidden or detached: wait for a real size
        expected = self.shape.graph_width(self.cell) if self.cell else 0
        if report["width"] < WIDTH_SLACK * expected:
            return  # measured before the new arrangement showed
        if report["revision"] in self._answered:
            return  # the same drawing measured again (a scrollbar came): see `resized`
        self._answered.add(report["revision"])
        if not self.measured:
            self.measured, self.measured_at = True, self.cell
        if not report["fits"] and self._fold(drawn):
            self.refresh()
        else:
            self._widen(report.get("across", 0))

    def _fold(self, drawn: int) -> bool:
        """One step more folding for a graph (`drawn` nodes now) that did not fit; False when
        there is none to take."""
        if not self.fold_leaves and drawn <= FOLD_ABOVE:
            return False  # a small graph as it is drawn by default: never folded for the screen
        current = self.max_depth if self.shown is None else self.shown
        if not self.fold_leaves:  # first: leaf modules as boxes, runs of blocks grouped
            self.fold_leaves = True
            self.cap = current
        elif current > 0 and (lower := self._next_view(current))[1] >= MIN_OVERVIEW:
            self.cap = lower[0]
        else:
            return False  # nothing worth folding: the page shows the readable top of the graph
        return True

    def _widen(self, across: int) -> None:
        """The graph is drawn for good, `across` px wide at readable labels: the chart goes
        under it when that gives it the width it lacks beside the chart (Notebook 7 centres
        its notebook, so the cell is ~1,108 px at any window size: beside a 443 px chart the
        graph had 665 px, and a small CNN's first view cut its frozen stage off)."""
        self.across = across
        shape = self._arranged()
        if self.cell > 0 and shape != self.shape:
            self.shape = shape
            self._apply()
            self.refresh_chart()

    def _arranged(self) -> Arrangement:
        """The arrangement for the cell and the graph now (a chart put under the graph for its
        width is held there through a scrollbar's width)."""
        return arrange(self.cell, self.across, HOLD_UNDER if self.shape.stacked else 0)

    def _apply(self) -> None:
        """The arrangement as ipywidgets layout: a column when stacked, else a row; stacked,
        the hook readout moves above the graph (the chart under the graph would put it below
        the fold), in a box of fixed height."""
        s = self.shape
        if self.readout is not None:
            r = self.readout.layout
            r.order = "1" if s.stacked else None  # toolbar and notes (order 0) stay first
            self.body.layout.order = "2" if s.stacked else None
            fixed = s.stacked and HINT_CLASS not in self.readout.value
            r.height = READOUT_HEIGHT if fixed else None
            r.overflow = "auto" if s.stacked else None
            r.flex = "0 0 auto" if s.stacked else None
        self.body.layout.flex_flow = "column" if s.stacked else "row nowrap"
        self.body.layout.align_items = "stretch" if s.stacked else "flex-start"
        self.graph_box.layout.flex = "0 0 auto" if s.stacked else "1 1 0%"
        self.graph_box.layout.width = "100%" if s.stacked else "auto"
        self.chart_box.layout.width = "100%" if s.stacked else f"{s.chart_width}px"
        self.chart_box.layout.flex = "0 0 auto"


def _leaf_modules(graph: GradGraph, expand: Collection[str]) -> frozenset[str]:
    """Modules without children (none in `expand`): folded into boxes once the screen made the
    view fold."""
    return frozenset(
        p for p, m in graph.modules.items() if p and not m.children and p not in expand
    )
