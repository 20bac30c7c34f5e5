"""The whole explorer in marimo.

marimo draws anywidgets but not classic ipywidgets, so an `ExplorerWidget` (an ipywidgets
VBox) shows marimo's "not supported" banner. Inside marimo, `GradExplorer.show()` still builds
the same ExplorerWidget (all state, actions and the ActionGuard stay in one place) and gives it
marimo's display hook (``_display_``): marimo then draws

* the toolbar and the notes line as a `Mirror` (a small anywidget that draws the widget's own
  ipywidgets controls from a plain description and turns each change in the page into the
  same change of that control, so the widget's existing observers and click handlers run),
* the graph pane and the chart (both anywidgets) side by side,
* the hook readout as a second `Mirror`.

Python is the single source of truth: every change of a mirrored control (a re-run that
failed and was undone, compare mode entered from Python) is drawn again in the page.
Torch-free at import; marimo is imported only when a view is drawn.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import anywidget
import ipywidgets as W
import traitlets

from ..render.chart import CHART_BOX_PX
from .marimo_esm import CSS, ESM

if TYPE_CHECKING:
    from .explorer_widget import ExplorerWidget

#: a widget's traits that change what the mirror draws
WATCHED = ("value", "index", "options", "description", "disabled", "tooltip", "tooltips")
CHART_MAX_HEIGHT = f"{CHART_BOX_PX}px"  # as in the notebook widget: taller charts scroll there


def in_marimo() -> bool:
    """True inside a running marimo notebook (``marimo edit`` / ``marimo run``); marimo is
    never imported here: if it is not imported already, this is not marimo.

    Example:
        >>> in_marimo()
        False
    """
    mo = sys.modules.get("marimo")
    if mo is None:
        return False
    try:
        return bool(mo.running_in_notebook())
    except Exception:  # noqa: BLE001 - an odd marimo: fall back to the notebook widget
        return False


def leaves(roots: Sequence[W.Widget]) -> list[W.Widget]:
    """The controls and HTML lines under `roots` (boxes walked depth first), in page order.

    Example:
        >>> run, mode = W.Button(description="Run"), W.Dropdown(options=["a", "b"])
        >>> leaves([W.VBox([W.HBox([run, mode]), W.HTML("x")])])[:2] == [run, mode]
        True
    """
    out: list[W.Widget] = []
    for w in roots:
        out.extend(leaves(w.children) if isinstance(w, W.Box) else [w])
    return out


def describe(w: W.Widget, ids: dict[int, int]) -> dict[str, Any]:
    """What the page draws for `w`: plain data (labels stay text; only ``html`` is markup).

    Example:
        >>> d = W.Dropdown(options=[("auto", "auto"), ("2", 2)], value=2, description="fold at")
        >>> describe(d, {id(d): 0})
        {'id': 0, 'hidden': False, 'kind': 'select', 'label': 'fold at', 'options': ['auto', '2'], 'index': 1, 'disabled': False}
    """
    hidden = getattr(w.layout, "display", None) == "none"
    out: dict[str, Any] = {"id": ids.get(id(w), -1), "hidden": hidden}
    if isinstance(w, W.Box):
        kids = [describe(c, ids) for c in w.children]
        return out | {"kind": "box", "row": isinstance(w, W.HBox), "children": kids}
    if isinstance(w, W.HTML):
        return out | {"kind": "html", "html": w.value}
    label, tip = getattr(w, "description", ""), getattr(w, "tooltip", None) or ""
    if isinstance(w, W.Button):
        primary = w.button_style == "primary"
        return out | {"kind": "button", "label": label, "tooltip": tip, "primary": primary}
    if isinstance(w, W.ToggleButton):
        return out | {"kind": "toggle", "label": label, "tooltip": tip, "pressed": bool(w.value)}
    if isinstance(w, (W.Dropdown, W.ToggleButtons)):
        index = -1 if w.index is None else w.index
        kind = "toggles" if isinstance(w, W.ToggleButtons) else "select"
        out |= {"kind": kind, "label": label, "options": list(w._options_labels)}
        out |= {"index": index, "disabled": bool(w.disabled)}
        return out | ({"tooltips": list(w.tooltips)} if kind == "toggles" else {})
    if isinstance(w, W.FloatText):
        return out | {"kind": "number", "label": label, "value": w.value}
    return out | {"kind": "html", "html": "", "hidden": True}  # not drawn in marimo


class Mirror(anywidget.AnyWidget):
    """Draws ipywidgets `roots` (boxes, buttons, toggles, menus, number fields, HTML) in any
    anywidget front end; a change in the page sets the same control here (a click clicks it),
    so the handlers already wired to it run, each through `guard` (an ActionGuard).

    Example:
        >>> from gradviz_widgets.widget.controller import ActionGuard
        >>> seen, errors = [], []
        >>> run = W.Button(description="Run")
        >>> run.on_click(lambda _: seen.append("run"))
        >>> m = Mirror([W.HBox([run])], ActionGuard(errors.append))
        >>> m.receive({"id": 0, "click": True}); seen
        ['run']
        >>> m.receive({"id": 7}); [str(e) for e in errors]
        ['no control 7 in this view']
    """

    _esm = ESM
    _css = CSS
    tree = traitlets.List(traitlets.Dict()).tag(sync=True)
    revision = traitlets.Int(0).tag(sync=True)  # bumped after each change: the page redraws

    def __init__(self, roots: Sequence[W.Widget], guard: Any) -> None:
        super().__init__()
        self.roots = list(roots)
        self.guard = guard
        self.controls = leaves(self.roots)
        self._ids = {id(w): i for i, w in enumerate(self.controls)}
        for w in [*self.controls, *_boxes(self.roots)]:
            w.observe(self.redraw, names=[t for t in WATCHED if w.has_trait(t)])
            w.layout.observe(self.redraw, names=["display"])
        self.on_msg(lambda _w, content, _buffers: self.receive(content))
        self.redraw()

    def redraw(self, _change: Any = None) -> None:
        """Describe the mirrored widgets again (the page redraws when that changes)."""
        self.tree = [describe(w, self._ids) for w in self.roots]

    def receive(self, content: Any) -> None:
        """One change from the page: found under the guard (a bad message shows in the status
        line), then made on the control, whose own guarded handlers do the work."""
        found: list[Callable[[], Any]] = []
        self.guard.call(lambda: found.append(self._change(content)))
        for change in found:
            try:
                change()
            except Exception as e:  # noqa: BLE001 - the handlers are guarded; this is a backstop
                self.guard.on_error(e)
            self.redraw()
            self.revision += 1  # a rejected or unchanged value: the page shows the one in force

    def _change(self, content: Any) -> Callable[[], Any]:
        key = content.get("id") if isinstance(content, dict) else None
        if not isinstance(key, int) or not 0 <= key < len(self.controls):
            raise ValueError(f"no control {key} in this view")
        w = self.controls[key]
        if isinstance(w, W.Button):
            return w.click
        if isinstance(w, (W.Dropdown, W.ToggleButtons)):
            index = content.get("index")
            if not isinstance(index, int) or not 0 <= index < len(w.options):
                raise ValueError(f"{w.description or 'menu'}: no option {index!r}")
            return lambda: setattr(w, "index", index)
        if isinstance(w, W.ToggleButton):
            return lambda: setattr(w, "value", bool(content.get("value")))
        if isinstance(w, W.FloatText):
            value = content.get("value")
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ValueError(f"{w.description}: enter a number")
            return lambda: setattr(w, "value", float(value))
        raise ValueError(f"{type(w).__name__} cannot be changed from this view")


def _boxes(roots: Sequence[W.Widget]) -> list[W.Widget]:
    out: list[W.Widget] = []
    for w in roots:
        if isinstance(w, W.Box):
            out += [w, *_boxes(w.children)]
    return out


class MarimoView:
    """The marimo layout of one ExplorerWidget: toolbar and notes, graph and chart side by
    side, hook readout. Built once per widget (`marimo_view`), drawn by `layout()`.

    Example:
        >>> view = MarimoView(widget)   # doctest: +SKIP
        >>> view.toolbar.receive({"id": 1, "click": True})   # doctest: +SKIP
    """

    def __init__(self, widget: ExplorerWidget) -> None:
        self.widget = widget
        self.toolbar = Mirror([widget.toolbar, widget.notes], widget.guard)
        self.readout = Mirror([widget.readout], widget.guard)
        self._layout: Any = None

    def control(self, description: str) -> int:
        """The toolbar id of the control labelled `description` (for tests and scripts)."""
        for i, w in enumerate(self.toolbar.controls):
            if getattr(w, "description", None) == description:
                return i
        raise KeyError(description)

    def layout(self) -> Any:
        """The marimo Html of the whole explorer (made once; its parts update themselves)."""
        if self._layout is None:
            import marimo as mo  # only ever called by marimo

            w = self.widget
            graph = mo.ui.anywidget(w.pane).text
            chart = mo.ui.anywidget(w.chart).text
            # the row is the explorer's cell (`gv-explorer`): the pane reports its width, so the
            # chart takes its share as in Jupyter (it stayed 440 px beside a 1,248 px graph)
            body = (
                '<div class="gv-explorer" style="display:flex;flex-flow:row wrap;gap:8px;'
                'align-items:flex-start;width:100%">'
                '<div style="flex:1 1 340px;min-width:300px;max-width:100%">'
                f"{graph}</div>"
                '<div style="flex:0 1 auto;max-width:100%;overflow:hidden auto;'
                f'max-height:{CHART_MAX_HEIGHT}">{chart}</div></div>'
            )
            parts = [mo.ui.anywidget(self.toolbar), mo.Html(body), mo.ui.anywidget(self.readout)]
            self._layout = mo.vstack(parts, gap=0.5)
        return self._layout


def marimo_view(widget: ExplorerWidget) -> ExplorerWidget:
    """`widget`, drawn whole by marimo: its view is `widget.marimo` and marimo's display hook
    ``_display_`` returns the view's layout. The widget keeps its API (`rerun()`, `pane`...).

    Example:
        >>> w = marimo_view(GradExplorer(model, x).show())   # doctest: +SKIP
    """
    view = MarimoView(widget)
    target: Any = widget  # two plain attributes on the instance; the class is unchanged
    target.marimo = view
    target._display_ = view.layout
    return widget
