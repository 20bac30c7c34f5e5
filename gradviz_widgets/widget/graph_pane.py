"""GraphPane: an anywidget that lays out Graphviz DOT in the browser and makes it interactive.

The front end (``js/``, bundled into ``static/graph_pane.js`` by ``pip install -e .``) runs
Graphviz as WebAssembly in a Web Worker, so no ``dot`` binary and no network are needed.
DOT names nodes and clusters by generated keys (n0, c0, ...; see ``render.render_dot``) and
``key_map`` maps each key to its Python node id or module path; everything else here (``nodes``,
``selected``, ``highlight``, click messages) speaks Python node ids. Without ``key_map`` (a
hand-written DOT) the DOT node names are the ids.
"""

from __future__ import annotations

import itertools
import pathlib
from collections.abc import Callable
from typing import Any

import anywidget
import traitlets as t
from ipywidgets import CallbackDispatcher

__all__ = ["BUNDLE_PATH", "BundleMissingError", "GraphPane"]

BUNDLE_PATH = pathlib.Path(__file__).resolve().parents[1] / "static" / "graph_pane.js"
#: the pane's CSS (js/graph_pane.css, copied by the build): anywidget injects it as `_css`
CSS_PATH = BUNDLE_PATH.with_name("graph_pane.css")
_BUNDLE_AT_IMPORT = BUNDLE_PATH.is_file()

_MISSING_MSG = (
    f"The GraphPane front-end bundle is missing ({BUNDLE_PATH}). "
    "From the repository root, run pip install -e . to build the JS bundle "
    "(needs Node.js and npm), or `npm ci && node build.mjs` in js/; then restart the kernel."
)

# Placeholder front end used only when the bundle is missing at import time, so that
# importing gradviz_widgets still works; GraphPane() itself raises BundleMissingError.
_MISSING_ESM = (
    "export default { render({ el }) { el.textContent = "
    + repr(_MISSING_MSG).replace("'", '"')
    + "; } };\n"
)


class BundleMissingError(FileNotFoundError):
    """Raised when ``gradviz_widgets/static/graph_pane.js`` has not been built."""


StrCallback = Callable[[str], Any]
SvgCallback = Callable[[str], Any]


class GraphPane(anywidget.AnyWidget):
    """Interactive Graphviz view of a backward graph.

    Python sets ``dot`` (and bumps ``revision``), ``key_map``, ``nodes`` (per-node info for tooltips,
    search, hook markers and double-click scope toggling), ``legend``, ``status_text``,
    ``status_level``, ``selected`` and ``highlight``. The browser reports clicks
    (``on_node_click``), double-clicks on modules (``on_toggle_scope``), layout failures
    (``on_layout_error``) and, after each layout, sets ``rendered``.

    Python owns the selection: a click only sends a message, and the pane selects the clicked
    node here (before the callbacks run, which may select another); the page shows
    ``selected`` and the hook markers as classes on the drawn nodes, never by a new layout.
    """

    _esm = BUNDLE_PATH if _BUNDLE_AT_IMPORT else _MISSING_ESM
    # a file anywidget injects into the page (and re-reads in its dev mode); "" when the build
    # has not run, and the bundle's own copy of the CSS takes over
    _css = CSS_PATH if CSS_PATH.is_file() else ""

    dot = t.Unicode("").tag(sync=True)
    key_map = t.Dict().tag(sync=True)
    revision = t.Int(0).tag(sync=True)
    nodes = t.Dict().tag(sync=True)
    #: module path -> the hook marker of its frame, where it is drawn open (`hooked_clusters`)
    clusters = t.Dict().tag(sync=True)
    #: every module and parameter: [name, "module" | "param", id of the drawn node showing it]
    search_index: t.List[list[str]] = t.List().tag(sync=True)
    selected = t.Unicode("").tag(sync=True)
    highlight = t.List(t.Unicode()).tag(sync=True)
    legend = t.List(t.Dict()).tag(sync=True)
    status_text = t.Unicode("").tag(sync=True)
    status_level = t.Enum(["info", "busy", "warning", "error"], default_value="info").tag(sync=True)
    rendered = t.Dict().tag(sync=True)
    height = t.Unicode("480px").tag(sync=True)
    layout_timeout = t.Float(30.0).tag(sync=True)

    def __init__(self, **kwargs: Any) -> None:
        if not (_BUNDLE_AT_IMPORT and BUNDLE_PATH.is_file()):
            raise BundleMissingError(_MISSING_MSG)
        super().__init__(**kwargs)
        self._node_click = CallbackDispatcher()
        self._toggle_scope = CallbackDispatcher()
        self._layout_error = CallbackDispatcher()
        self._fit = CallbackDispatcher()
        self._resize = CallbackDispatcher()
        self._reveal = CallbackDispatcher()
        self._svg_requests: dict[int, SvgCallback] = {}
        self._request_ids = itertools.count(1)
        self.last_layout_error: str = ""
        self.on_msg(self._on_frontend_msg)

    # -- Python -> browser -------------------------------------------------------------

    def set_graph(
        self,
        dot: str,
        nodes: dict[str, dict[str, Any]] | None = None,
        legend: list[dict[str, Any]] | None = None,
        keys: dict[str, str] | None = None,
        index: list[list[str]] | None = None,
        clusters: dict[str, dict[str, Any]] | None = None,
    ) -> int:
        """Replace the graph (and optionally node info / legend) in one update; return the revision.

        `keys` maps the DOT's node/cluster names to Python ids (``render.DotGraph.keys``); it
        is replaced together with the DOT (empty when not given).
        """
        with self.hold_sync():
            self.key_map = dict(keys or {})
            if nodes is not None:
                self.nodes = nodes
            if legend is not None:
                self.legend = legend
            if index is not None:
                self.search_index = index
            if clusters is not None:
                self.clusters = clusters
            self.dot = dot
            self.revision += 1
        return self.revision

    def set_status(self, text: str, level: str = "info") -> None:
        """Show ``text`` in the status line (level: info, busy, warning or error)."""
        with self.hold_sync():
            self.status_level = level
            self.status_text = text

    def reveal(self, node_id: str) -> None:
        """Select ``node_id`` and scroll it into view."""
        self.selected = node_id

    def download(self, filename: str, text: str, mime: str = "text/plain") -> None:
        """Offer `text` as a file download in the browser (nothing is written on the server)."""
        self.send({"kind": "download", "filename": filename, "text": text, "mime": mime})

    def download_svg(self) -> None:
        """Download the SVG of the current layout from the browser (it has the layout)."""
        self.send({"kind": "download_svg"})

    def request_svg(self, callback: SvgCallback) -> int:
        """Ask the browser for the SVG of the current layout; ``callback(svg_text)`` gets it.

        The answer arrives asynchronously (after the running cell finishes). Returns the
        request number. The callback gets "" when nothing has been laid out yet.
        """
        request = next(self._request_ids)
        self._svg_requests[request] = callback
        self.send({"kind": "request_svg", "request": request})
        return request

    # -- callbacks -----------------------------------------------------------------------

    def on_node_click(self, callback: StrCallback, remove: bool = False) -> None:
        """Register ``callback(node_id)`` for single clicks on nodes."""
        self._node_click.register_callback(callback, remove=remove)

    def on_toggle_scope(self, callback: StrCallback, remove: bool = False) -> None:
        """Register ``callback(module_path)`` for double-clicks on a cluster or module node."""
        self._toggle_scope.register_callback(callback, remove=remove)

    def on_layout_error(self, callback: StrCallback, remove: bool = False) -> None:
        """Register ``callback(message)`` for layouts that failed in the browser."""
        self._layout_error.register_callback(callback, remove=remove)

    def on_fit(self, callback: Callable[[dict[str, Any]], Any], remove: bool = False) -> None:
        """Register ``callback(report)`` for the page's fit reports after a fresh layout or a
        new viewport size: ``{"revision", "fits", "width", "height", "cell", "across"}``
        (``fits``: the whole graph fitted at readable label size; ``across``: its width in px at
        that size, 0 when not known)."""
        self._fit.register_callback(callback, remove=remove)

    def on_reveal(self, callback: StrCallback, remove: bool = False) -> None:
        """Register ``callback(name)`` for the search box asking to unfold to a module or
        parameter that a folded node hides."""
        self._reveal.register_callback(callback, remove=remove)

    def on_resize(self, callback: Callable[[int], Any], remove: bool = False) -> None:
        """Register ``callback(cell_width_px)`` for a new width of the widget's output."""
        self._resize.register_callback(callback, remove=remove)

    def close(self) -> None:
        """Close the pane and drop its callbacks: anywidget keeps a pane whose `_esm` is a
        file alive, and through the callbacks it would keep whoever registered them."""
        for name in (
            "_node_click",
            "_toggle_scope",
            "_layout_error",
            "_svg_requests",
            "_fit",
            "_reveal",
            "_resize",
        ):
            held = getattr(self, name, None)  # None: closed before __init__ ended
            if held is not None:
                (held.callbacks if isinstance(held, CallbackDispatcher) else held).clear()
        super().close()

    def _on_frontend_msg(self, _widget: Any, content: Any, buffers: list[Any]) -> None:
        """Dispatch a custom message from the browser to the registered callbacks."""
        if not isinstance(content, dict):
            return
        kind = content.get("kind")
        if kind == "node_click":
            node_id = content.get("id")
            if node_id is None:  # a message naming only the DOT key
                node_id = self.key_map.get(str(content.get("key", "")), "")
            self.selected = str(node_id)
            self._node_click(str(node_id))
        elif kind == "toggle_scope":
            module = str(content.get("module", ""))
            if module:
                self._toggle_scope(module)
        elif kind == "layout_error":
            self.last_layout_error = str(content.get("message", ""))
            self._layout_error(self.last_layout_error)
        elif kind == "fit":
            self._fit(_fit_report(content))
        elif kind == "reveal":
            name = content.get("name")
            if isinstance(name, str) and name:
                self._reveal(name)
        elif kind == "resize":
            cell = _number(content.get("cell"))
            if cell > 0:
                self._resize(int(cell))
        elif kind == "svg":
            request = content.get("request")
            callback = self._svg_requests.pop(request, None) if isinstance(request, int) else None
            if callback is not None:
                callback(str(content.get("svg") or ""))


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _fit_report(content: dict[str, Any]) -> dict[str, Any]:
    """A fit message from the page as plain, checked values."""
    revision = content.get("revision")
    return {
        "revision": revision if isinstance(revision, int) else -1,
        "fits": content.get("fits") is not False,
        **{k: int(_number(content.get(k))) for k in ("width", "height", "cell", "across")},
    }
