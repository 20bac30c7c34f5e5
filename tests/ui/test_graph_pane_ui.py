"""GraphPane end to end: real JupyterLab, headless Chromium, no network."""

from __future__ import annotations

from typing import Any

import pytest
from harness import LabPage, is_allowed, py, settled, wait_until

NOTEBOOK_CELLS = [
    r'''import json
from gradviz_widgets.vocabulary import STYLES
from gradviz_widgets.widget.graph_pane import GraphPane

DOT = r"""digraph backward {
  graph [rankdir=BT];
  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];
  subgraph "cluster_layer1" {
    label="layer1 (Linear)";
    "main1/AddmmBackward0#0" [label="AddmmBackward0", fillcolor="#c6e6c6"];
    "param:main1.weight" [label="weight (16, 4)", shape=ellipse, fillcolor="#c6e6c6"];
  }
  "main1/ReluBackward0#1" [label="ReluBackward0", fillcolor="#ffd0d0", style="rounded,filled,dashed"];
  "loss" [label="\n ()", fillcolor="#eeeeee"];
  "param:main1.weight" -> "main1/AddmmBackward0#0";
  "main1/AddmmBackward0#0" -> "main1/ReluBackward0#1";
  "main1/ReluBackward0#1" -> "loss";
}"""


def info(label, op, module, kind, status, norm, shape, hooked=False, collapsible=""):
    return {"label": label, "op": op, "module": module, "kind": kind, "status": status,
            "grad_norm": norm, "shape": shape, "hooked": hooked, "expandable": "",
            "collapsible": collapsible,
            # the words Python sends with each node (render.node_texts); the JS keeps no copy
            "status_text": STYLES[status].words if status in STYLES else status}


NODES = {
    "main1/AddmmBackward0#0": info("AddmmBackward0", "AddmmBackward0", "layer1", "op", "ok",
                                   0.125, "(8, 16)", hooked=True, collapsible="layer1"),
    "param:main1.weight": info("weight (16, 4)", "", "layer1", "param", "ok", 0.5, "(16, 4)",
                               collapsible="layer1"),
    "main1/ReluBackward0#1": info("ReluBackward0", "ReluBackward0", "", "op", "vanishing",
                                  1.5e-9, "(8, 16)"),
    "loss": info("()", "", "", "output", "ok", None, "()"),
}
LEGEND = [
    {"status": "ok", "label": "healthy", "color": "#2ca02c", "dash": False},
    {"status": "vanishing", "label": "vanishing", "color": "#d62728", "dash": "dashed"},
]
events = {"click": [], "toggle": [], "error": [], "svg": []}
pane = GraphPane(height="420px")
pane.on_node_click(events["click"].append)
pane.on_toggle_scope(events["toggle"].append)
pane.on_layout_error(events["error"].append)
pane.set_graph(DOT, nodes=NODES, legend=LEGEND)
pane.set_status("hand-written test graph", "info")''',
    "pane",
]

NODE_IDS = {"main1/AddmmBackward0#0", "param:main1.weight", "main1/ReluBackward0#1", "loss"}


def node(lab: LabPage, node_id: str) -> Any:
    """Locator of the graph node drawn for ``node_id`` (a hand-written DOT without a key map:
    the DOT node name, kept as ``data-key``, is the id)."""
    return lab.page.locator(f'.gvw-pane g.node[data-key="{node_id}"]').first


def wait_py(lab: LabPage, expr: str, what: str, timeout: float = 30) -> Any:
    """Poll a Python expression until it is truthy."""
    return wait_until(lambda: py(lab, expr), timeout, what, interval=0.3)


@pytest.mark.ui
def test_graph_pane_in_jupyterlab(lab: LabPage) -> None:
    lab.notebook("graph_pane_ui.ipynb", NOTEBOOK_CELLS)
    lab.open_notebook("graph_pane_ui.ipynb")
    lab.run_all()

    # The SVG appears with one g.node per DOT node; titles are the ids.
    lab.page.wait_for_function(
        "() => document.querySelectorAll('.gvw-pane svg g.node').length === 4", timeout=60_000
    )
    keys = lab.page.eval_on_selector_all(
        ".gvw-pane svg g.node", "els => els.map(e => e.dataset.key)"
    )
    assert set(keys) == NODE_IDS
    # focusable buttons with an accessible name (label, status in words, module)
    a11y = lab.page.eval_on_selector_all(
        ".gvw-pane svg g.node",
        "els => els.map(e => [e.getAttribute('tabindex'), e.getAttribute('role'),"
        " e.getAttribute('aria-label')])",
    )
    assert all(t == "0" and r == "button" and name for t, r, name in a11y), a11y
    assert ["0", "button", "ReluBackward0, vanishing gradient"] in a11y
    assert lab.page.eval_on_selector_all(".gvw-pane svg g.cluster > title", "e => e.length") == 1

    # The browser reported the layout back through the `rendered` trait, laid out in a worker.
    rendered = wait_py(lab, "pane.rendered", "rendered trait")
    assert rendered["revision"] == 1 and rendered["nodes"] == 4, rendered
    assert rendered["engine"] == "worker", rendered
    assert rendered["ms"] >= 0

    # Status line, legend, hook marker.
    status = lab.page.locator(".gvw-status")
    assert status.inner_text() == "hand-written test graph"
    # its two statuses, the hook marker and the parameter stripe
    assert lab.page.locator(".gvw-legend .gvw-legend-item").count() == 4
    assert "worst status" in lab.page.locator(".gvw-legend").inner_text()
    # a long status line is one row high; a click shows it whole, another folds it back
    lab.evaluate_json(
        'pane.status_text = "; ".join(["finding %d" % i for i in range(60)]); print(1)'
    )
    lab.page.wait_for_function(
        "() => document.querySelector('.gvw-status').textContent.includes('finding 59')"
    )
    row = status.bounding_box()["height"]
    status.click()
    assert status.get_attribute("aria-expanded") == "true"
    assert status.bounding_box()["height"] > 2 * row
    status.click()
    assert status.bounding_box()["height"] == row
    lab.evaluate_json('pane.status_text = "hand-written test graph"; print(1)')
    assert "hooked" in (node(lab, "main1/AddmmBackward0#0").get_attribute("class") or "")
    lab.screenshot("graph_pane_rendered", ".gvw-pane")

    # Hover: tooltip with op, module, grad norm, status.
    node(lab, "main1/AddmmBackward0#0").hover()
    tooltip = lab.page.locator(".gvw-tooltip")
    tooltip.wait_for(state="visible", timeout=5_000)
    text = tooltip.inner_text()
    for part in ("AddmmBackward0", "layer1", "0.125", "(8, 16)", "ok", "hooked"):
        assert part in text, (part, text)

    # Single click on a node: selected in the page and in Python, node_click callback fired.
    node(lab, "param:main1.weight").click()
    assert wait_py(lab, "events['click']", "node_click") == ["param:main1.weight"]
    assert py(lab, "pane.selected") == "param:main1.weight"
    assert "gvw-selected" in (node(lab, "param:main1.weight").get_attribute("class") or "")

    # Double click on the cluster label: toggle_scope for the module.
    lab.page.locator(".gvw-pane g.cluster > text").first.dblclick()
    assert wait_py(lab, "events['toggle']", "toggle_scope") == ["layer1"]

    # request_svg round trip.
    lab.execute("pane.request_svg(events['svg'].append)")
    svgs = wait_py(lab, "events['svg']", "svg reply")
    assert "<title>loss</title>" in svgs[0] and svgs[0].rstrip().endswith("</svg>")

    # Python-driven highlight and the search box.
    lab.execute("pane.highlight = ['main1/ReluBackward0#1']")
    lab.page.wait_for_function(
        "() => document.querySelector('.gvw-pane g.node.gvw-highlight')?.dataset.key"
        " === 'main1/ReluBackward0#1'",
        timeout=10_000,
    )
    lab.page.locator(".gvw-search").fill("relu")
    assert lab.page.locator(".gvw-count").inner_text() == "1/1"
    assert "gvw-current" in (node(lab, "main1/ReluBackward0#1").get_attribute("class") or "")
    lab.screenshot("graph_pane_interacted", ".gvw-pane")

    # A DOT that cannot be laid out: error in the status line, old graph kept, Python told.
    lab.execute("pane.set_graph('digraph { a -> ')")
    errors = wait_py(lab, "events['error']", "layout_error")
    assert "syntax error" in errors[0]
    lab.page.wait_for_function(
        "() => document.querySelector('.gvw-status')?.dataset.level === 'error'", timeout=10_000
    )
    assert "Layout failed" in status.inner_text()
    assert lab.page.locator(".gvw-pane svg g.node").count() == 4
    lab.screenshot("graph_pane_layout_error", ".gvw-pane")

    # ...and the widget keeps working: a new valid graph renders and clicks still arrive.
    lab.execute("pane.set_graph(DOT.replace('ReluBackward0\"', 'ReluBackward0 (v2)\"'))")
    wait_py(lab, "pane.rendered['revision'] == 3", "re-render after the error")
    lab.page.locator(".gvw-fit").click()
    node(lab, "loss").click()
    assert wait_py(lab, "events['click'][-1] == 'loss'", "second click")
    assert lab.page.locator(".gvw-status").get_attribute("data-level") != "error"

    # "Download SVG" saves the current layout client-side.
    with lab.page.expect_download(timeout=10_000) as download:
        lab.page.locator(".gvw-download").click()
    assert download.value.suggested_filename == "gradviz-graph.svg"
    saved = open(download.value.path(), encoding="utf-8").read()
    assert "<title>loss</title>" in saved and "ReluBackward0 (v2)" in saved

    # Ctrl + wheel zooms around the pointer; a drag that starts on a node pans and is no click.
    def view_box() -> list[float]:
        vb = lab.page.eval_on_selector(
            ".gvw-viewport > svg", "s => s.getAttribute('data-view-box')"
        )
        return [float(v) for v in vb.split()]

    lab.page.locator(".gvw-fit").click()
    b = node(lab, "main1/ReluBackward0#1").bounding_box()
    x, y = b["x"] + b["width"] / 2, b["y"] + b["height"] / 2
    before = view_box()
    lab.page.mouse.move(x, y)
    # the wheel alone scrolls the notebook past the graph (it zoomed it to a thumbnail) and
    # says how to zoom; Ctrl + wheel zooms
    lab.page.mouse.wheel(0, -300)
    hint = lab.page.locator(".gvw-hint").first
    wait_until(lambda: hint.is_visible() and "Ctrl + wheel" in hint.inner_text(), 5, "the hint")
    assert view_box() == before
    relu = node(lab, "main1/ReluBackward0#1")
    relu.scroll_into_view_if_needed()  # the notebook scrolled
    b = relu.bounding_box()
    x, y = b["x"] + b["width"] / 2, b["y"] + b["height"] / 2
    lab.page.mouse.move(x, y)
    lab.page.keyboard.down("Control")
    lab.page.mouse.wheel(0, -300)
    lab.page.keyboard.up("Control")
    wait_until(lambda: view_box() != before, 5, "wheel zoom")
    zoomed = settled(view_box)  # a wheel's events may land over several frames
    assert zoomed[2] < before[2]
    # each button's zoom lands on a later frame: wait for it, never read it at once
    lab.page.locator(".gvw-zoom-out").click()
    out = wait_until(lambda: (v := view_box()) != zoomed and v, 5, "zoom-out button")
    assert out[2] > zoomed[2]
    lab.page.locator(".gvw-zoom-in").click()
    back = wait_until(lambda: (v := view_box()) != out and v, 5, "zoom-in button")
    assert back[2] == pytest.approx(zoomed[2], rel=1e-6)
    n_clicks = py(lab, "len(events['click'])")
    lab.page.mouse.move(x, y)
    lab.page.mouse.down()
    lab.page.mouse.move(x + 80, y + 40, steps=6)
    lab.page.mouse.up()
    panned = view_box()
    assert panned[0] < zoomed[0] and panned[1] < zoomed[1], (zoomed, panned)
    assert py(lab, "len(events['click'])") == n_clicks
    lab.screenshot("graph_pane_zoomed", ".gvw-pane")

    # Nothing outside loopback was reachable; list what was blocked.
    assert all(not is_allowed(u) for u in lab.blocked)
    page_errors = [m for m in lab.console if m.startswith("pageerror") and "gvw" in m]
    assert not page_errors, page_errors


SLOW_CELLS = [
    r"""import json
from gradviz_widgets.widget.graph_pane import GraphPane

# A chain with weights shared across every third step (like an unrolled RNN): Graphviz
# needs about a minute for this, far beyond the 2 s budget given to the pane.
lines = ["digraph {"]
lines += [f"s{i - 1} -> s{i};" for i in range(1, 150)]
lines += [f"w{p} -> s{i};" for p in range(4) for i in range(p % 3, 150, 3)]
SLOW = "\n".join(lines + ["}"])
errors = []
slow = GraphPane(layout_timeout=2.0)
slow.on_layout_error(errors.append)
slow.set_graph(SLOW)""",
    "slow",
]


@pytest.mark.ui
def test_runaway_layout_is_stopped(lab: LabPage) -> None:
    lab.notebook("graph_pane_slow.ipynb", SLOW_CELLS)
    lab.open_notebook("graph_pane_slow.ipynb")
    lab.run_all()

    # The worker is stopped after layout_timeout; Python hears about it, the page says so.
    errors = wait_py(lab, "errors", "layout_error after the timeout", timeout=60)
    assert "did not finish within 2 s" in errors[0], errors
    lab.page.wait_for_function(
        "() => document.querySelector('.gvw-status')?.dataset.level === 'error'", timeout=10_000
    )
    assert lab.page.locator(".gvw-pane svg g.node").count() == 0

    # A graph of sensible size then lays out in a fresh worker.
    lab.execute("slow.set_graph('digraph { a -> b -> c }')")
    assert wait_py(lab, "slow.rendered.get('revision') == 2 and slow.rendered", "re-render")
    assert py(lab, "slow.rendered")["engine"] == "worker"
    assert lab.page.locator(".gvw-pane svg g.node").count() == 3
    assert lab.page.locator(".gvw-status").get_attribute("data-level") != "error"
    lab.screenshot("graph_pane_after_timeout", ".gvw-pane")
