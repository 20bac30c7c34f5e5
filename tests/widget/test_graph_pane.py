"""GraphPane without a browser: traits, front-end messages and the SVG request round trip."""

from __future__ import annotations

from typing import Any

import pytest
import traitlets

from gradviz_widgets.widget import graph_pane
from gradviz_widgets.widget.graph_pane import BUNDLE_PATH, BundleMissingError, GraphPane

DOT = 'digraph { subgraph "cluster_layer1" { "main1/AddmmBackward0#0" } "param:w" -> "main1/AddmmBackward0#0" }'
NODES = {
    "main1/AddmmBackward0#0": {
        "label": "AddmmBackward0",
        "op": "AddmmBackward0",
        "module": "layer1",
        "kind": "op",
        "status": "ok",
        "grad_norm": 0.5,
        "shape": "(8, 16)",
        "hooked": True,
        "expandable": "",
        "collapsible": "layer1",
    }
}


@pytest.fixture
def pane(monkeypatch: pytest.MonkeyPatch) -> tuple[GraphPane, list[dict[str, Any]]]:
    """A GraphPane whose outgoing custom messages are recorded instead of sent."""
    w = GraphPane()
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(w, "send", lambda content, buffers=None: sent.append(content))
    return w, sent


def frontend(w: GraphPane, content: dict[str, Any]) -> None:
    """Deliver a message as if the browser had sent it."""
    w._handle_custom_msg(content, [])


def test_traits_after_construction() -> None:
    w = GraphPane(dot=DOT, nodes=NODES)
    assert w.dot == DOT
    assert w.revision == 0
    assert w.nodes == NODES
    assert w.selected == ""
    assert w.highlight == []
    assert w.legend == []
    assert w.status_text == ""
    assert w.status_level == "info"
    assert w.rendered == {}
    assert "export default" in str(w._esm) or "render" in str(w._esm)
    state = w.get_state()
    names = "dot revision nodes selected highlight legend status_text status_level rendered"
    for name in names.split():
        assert name in state, name


def test_set_graph_bumps_revision_and_status() -> None:
    w = GraphPane()
    legend = [{"status": "ok", "label": "healthy", "color": "#2a2", "dash": False}]
    assert w.set_graph(DOT, nodes=NODES, legend=legend) == 1
    assert (w.dot, w.nodes, w.legend) == (DOT, NODES, legend)
    assert w.set_graph("digraph { x }") == 2
    assert w.nodes == NODES  # unchanged when not given
    w.set_status("layout failed", "error")
    assert (w.status_text, w.status_level) == ("layout failed", "error")
    with pytest.raises(traitlets.TraitError):
        w.status_level = "fatal"


def test_node_click_toggle_scope_and_layout_error_dispatch(pane: tuple[GraphPane, list]) -> None:
    w, _ = pane
    clicks: list[str] = []
    toggles: list[str] = []
    errors: list[str] = []
    w.on_node_click(clicks.append)
    w.on_toggle_scope(toggles.append)
    w.on_layout_error(errors.append)
    frontend(w, {"kind": "node_click", "id": "main1/AddmmBackward0#0"})
    frontend(w, {"kind": "toggle_scope", "module": "layer1"})
    frontend(w, {"kind": "toggle_scope", "module": ""})  # ignored
    frontend(w, {"kind": "layout_error", "message": "syntax error in line 1", "revision": 3})
    frontend(w, {"kind": "something_else"})
    frontend(w, ["not", "a", "dict"])  # type: ignore[arg-type]
    assert clicks == ["main1/AddmmBackward0#0"]
    assert toggles == ["layer1"]
    assert errors == ["syntax error in line 1"]
    assert w.last_layout_error == "syntax error in line 1"


def test_callbacks_can_be_removed(pane: tuple[GraphPane, list]) -> None:
    w, _ = pane
    clicks: list[str] = []
    w.on_node_click(clicks.append)
    w.on_node_click(clicks.append, remove=True)
    frontend(w, {"kind": "node_click", "id": "a"})
    assert clicks == []


def test_request_svg_round_trip(pane: tuple[GraphPane, list]) -> None:
    w, sent = pane
    got: list[tuple[str, str]] = []
    r1 = w.request_svg(lambda svg: got.append(("first", svg)))
    r2 = w.request_svg(lambda svg: got.append(("second", svg)))
    assert sent == [{"kind": "request_svg", "request": r1}, {"kind": "request_svg", "request": r2}]
    assert r1 != r2
    frontend(w, {"kind": "svg", "request": r2, "svg": "<svg>2</svg>"})
    frontend(w, {"kind": "svg", "request": r1, "svg": "<svg>1</svg>"})
    # a second view answering the same request is ignored; unknown requests too
    frontend(w, {"kind": "svg", "request": r1, "svg": "<svg>again</svg>"})
    frontend(w, {"kind": "svg", "request": 999, "svg": "<svg/>"})
    assert got == [("second", "<svg>2</svg>"), ("first", "<svg>1</svg>")]


def test_selected_and_highlight_are_plain_traits() -> None:
    w = GraphPane()
    seen: list[str] = []
    w.observe(lambda ch: seen.append(ch["new"]), names="selected")
    w.reveal("param:w")
    w.highlight = ["a", "b"]
    assert seen == ["param:w"]
    assert w.highlight == ["a", "b"]


def test_missing_bundle_gives_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_pane, "_BUNDLE_AT_IMPORT", False)
    with pytest.raises(BundleMissingError, match="run pip install -e . to build the JS bundle"):
        GraphPane()


def test_key_map_travels_with_the_dot_and_resolves_key_only_clicks(
    pane: tuple[GraphPane, list],
) -> None:
    w, sent = pane
    clicks: list[str] = []
    w.on_node_click(clicks.append)
    weird = "a\x00b<img src=x>/AddmmBackward0#0"
    w.set_graph('digraph { n0 [id="n0", label="x"] }', keys={"n0": weird, "c0": "at@1"})
    assert w.key_map == {"n0": weird, "c0": "at@1"}
    frontend(w, {"kind": "node_click", "key": "n0"})
    frontend(w, {"kind": "node_click", "id": weird, "key": "n0"})
    assert clicks == [weird, weird]
    w.set_graph("digraph { x }")
    assert w.key_map == {}  # a DOT without keys: its node names are the ids


def test_downloads_are_messages_to_the_browser(pane: tuple[GraphPane, list]) -> None:
    w, sent = pane
    w.download("grad_norms.csv", "a,b\n1,2\n", "text/csv")
    w.download_svg()
    assert sent == [
        {
            "kind": "download",
            "filename": "grad_norms.csv",
            "text": "a,b\n1,2\n",
            "mime": "text/csv",
        },
        {"kind": "download_svg"},
    ]


def test_css_goes_through_anywidget_css() -> None:
    # anywidget injects the file; the bundle keeps its own copy for hosts without anywidget
    w = GraphPane()
    css = graph_pane.CSS_PATH.read_text(encoding="utf-8")
    assert ".gvw-pane" in css and ".gvw-status" in css
    assert ".gvw-pane" in str(w._css)
    assert ".gvw-selected" in BUNDLE_PATH.read_text(encoding="utf-8")


def test_a_click_selects_in_python(pane: tuple[GraphPane, list]) -> None:
    # Python owns the selection: the page sends the click, the pane selects before callbacks
    w, _ = pane
    order: list[str] = []
    w.on_node_click(lambda node_id: order.append(w.selected))
    w._on_frontend_msg(w, {"kind": "node_click", "id": "param:w"}, [])
    assert order == ["param:w"] and w.selected == "param:w"
