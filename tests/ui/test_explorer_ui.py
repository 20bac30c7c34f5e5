"""The explorer end to end in real JupyterLab + headless Chromium: graph and chart appear, a
click on a graph node hooks its module and re-runs, a click on a bar selects the graph node."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from harness import ARTIFACTS, LabPage, is_allowed, py, wait_until

CELLS = [
    """import json
from torch import nn
from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example

net, x, y = dead_branch_example()
ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
w = ex.show()""",
    "w",
]


def wait_py(lab: LabPage, expr: str, what: str, timeout: float = 60) -> Any:
    return wait_until(lambda: py(lab, expr), timeout, what, interval=0.3)


def key_of(lab: LabPage, node_id: str) -> str:
    """The DOT key (n0, n1, ...) the node is drawn under now."""
    return py(lab, f"next(k for k, v in w.pane.key_map.items() if v == {node_id!r})")


def node(lab: LabPage, node_id: str) -> Any:
    return lab.page.locator(f'.gvw-pane g.node[data-key="{key_of(lab, node_id)}"]').first


PLOT_LINE_WIDTHS = "() => document.querySelector('.js-plotly-plot').data[0].marker.line.width"


@pytest.mark.ui
def test_explorer_click_node_and_bar(lab: LabPage) -> None:
    lab.notebook("explorer_ui.ipynb", CELLS)
    lab.open_notebook("explorer_ui.ipynb")
    lab.run_all()

    # graph (laid out in the browser) and chart (8 bars, one per parameter) appear
    expected = py(lab, "sum(1 for n in w.view.nodes if n.kind != 'accumulate')")
    lab.page.wait_for_function(
        f"() => document.querySelectorAll('.gvw-pane svg g.node').length === {expected}",
        timeout=90_000,
    )
    lab.page.wait_for_function(
        "() => document.querySelectorAll('.js-plotly-plot .bars .point').length === 8",
        timeout=60_000,
    )
    assert wait_py(lab, "w.pane.rendered.get('revision') == 1", "first layout reported")
    assert "exactly 0.0" in lab.page.locator(".gvw-status").inner_text()
    lab.screenshot("explorer_initial")

    # click the gate's node: its module gets a backward hook, the model re-runs
    node(lab, "gate/AddmmBackward0#0").click()
    assert wait_py(
        lab,
        "ex.hooks == [['gate', 'backward']] or ex.hooks == [('gate', 'backward')]",
        "hook toggled from the page",
    )
    assert py(lab, "[e.target for e in ex.events]") == ["gate"]
    assert py(lab, "w.runs") == 2
    # ...and the page shows it: new layout with the hooked marker, chart outlines the gate bars
    assert wait_py(lab, "w.pane.rendered.get('revision') == 2", "re-render after the click")
    gate = key_of(lab, "gate/AddmmBackward0#0")
    lab.page.wait_for_function(
        f"() => [...document.querySelectorAll('.gvw-pane g.node.hooked')]"
        f".some(g => g.dataset.key === '{gate}')",
        timeout=30_000,
    )
    lab.page.wait_for_function(
        f"() => ({PLOT_LINE_WIDTHS})().filter(v => v === 3).length === 2", timeout=30_000
    )
    assert "grad_output" in lab.page.locator(".gv-readout").inner_text()

    # click the bar of dead.weight (index 4): the graph selects the parameter's node
    bar = lab.page.locator(".js-plotly-plot .bars .point").nth(4)
    lab.page.locator(".js-plotly-plot").first.scroll_into_view_if_needed()
    box = bar.bounding_box()
    # on a log axis the bar's path runs past the plot area: aim at its visible part
    area = lab.page.locator(".js-plotly-plot .nsewdrag").first.bounding_box()
    bottom = min(box["y"] + box["height"], area["y"] + area["height"])
    cx, cy = box["x"] + box["width"] / 2, (box["y"] + bottom) / 2
    # plotly picks the point under its drag layer on hover; click once the hover label shows
    lab.page.mouse.move(cx - 3, cy - 3)
    lab.page.mouse.move(cx, cy, steps=5)
    hit = lab.page.evaluate(f"() => document.elementFromPoint({cx}, {cy})?.getAttribute('class')")
    assert hit and "drag" in hit, hit  # the point is on the plot, under plotly's drag layer
    # plotly clicks the point it hovers: a real pointer on the bar's visible part (aimed at
    # the path's own centre, below the plot area on a log axis, nothing is hovered)
    lab.page.wait_for_function(
        "() => (document.querySelector('.js-plotly-plot')._hoverdata || []).length > 0",
        timeout=10_000,
    )
    lab.page.mouse.click(cx, cy)
    assert wait_py(lab, "w.pane.selected == 'param:dead.weight'", "bar click reached Python")
    dead = key_of(lab, "param:dead.weight")
    lab.page.wait_for_function(
        f"() => [...document.querySelectorAll('.gvw-pane g.node.gvw-selected')]"
        f".some(g => g.dataset.key === '{dead}')",
        timeout=30_000,
    )
    # the bar click dimmed the rest of the graph; Escape clears it (here and in Python)
    lab.page.wait_for_function(
        "() => document.querySelector('.gvw-pane.gvw-has-highlight') !== null", timeout=10_000
    )
    node(lab, "param:dead.weight").focus()
    lab.page.keyboard.press("Escape")
    lab.page.wait_for_function(
        "() => document.querySelector('.gvw-pane.gvw-has-highlight') === null", timeout=10_000
    )
    assert wait_py(lab, "w.pane.highlight == []", "highlight cleared in Python")
    shot = lab.screenshot("explorer_after_clicks")
    shutil.copy(shot, ARTIFACTS / "explorer.png")

    assert all(not is_allowed(u) for u in lab.blocked)
    errors = [m for m in lab.console if m.startswith("pageerror")]
    assert not errors, errors
