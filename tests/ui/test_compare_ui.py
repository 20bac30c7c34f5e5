"""Compare mode end to end in real JupyterLab + headless Chromium at 1280x800: pin the run with
the Compare toggle, revive the dead gate, press Run, see grouped bars with the ratio and edges
coloured by B/A; the toggle again brings the normal view back."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
from harness import ARTIFACTS, LabPage, is_allowed, wait_until

CELLS = [
    """import json, torch
from torch import nn
from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example

net, x, y = dead_branch_example()
ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
w = ex.show()""",
    "w",
]
PLOT = "document.querySelector('.js-plotly-plot')"
# the colour of "B/A > 100 (or 0.0 -> gradient)": the gate's branch came back
REVIVED = "#7f3b08"


def wait_py(lab: LabPage, expr: str, what: str, timeout: float = 60) -> Any:
    return wait_until(
        lambda: lab.evaluate_json(f"print(json.dumps({expr}))"), timeout, what, interval=0.3
    )


def toolbar_button(lab: LabPage, text: str) -> Any:
    return lab.page.locator(".gv-toolbar button", has_text=text).first


@pytest.mark.ui
def test_compare_pin_fix_rerun(lab: LabPage) -> None:
    lab.page.set_viewport_size({"width": 1280, "height": 800})
    lab.notebook("compare_ui.ipynb", CELLS)
    lab.open_notebook("compare_ui.ipynb")
    lab.run_all()
    ran = wait_py(lab, "getattr(globals().get('w'), 'runs', 0)", "the widget ran", timeout=120)
    assert ran == 1
    lab.page.locator(".gv-explorer").first.scroll_into_view_if_needed()
    try:
        lab.page.wait_for_function(
            f"() => {PLOT}?.data?.length === 1 && "
            "document.querySelectorAll('.gvw-pane svg g.edge').length > 0",
            timeout=120_000,
        )
    except Exception:
        lab.screenshot("compare_first_view_missing")
        raise
    assert wait_py(lab, "w.pane.rendered.get('revision') == 1", "first layout reported")
    # the pane is styled by anywidget's _css (graph_pane.css), not by a <style> of its own
    styled = "() => [document.querySelectorAll('.gvw-pane style').length, getComputedStyle("
    styled += "document.querySelector('.gvw-status')).whiteSpace]"
    assert lab.page.evaluate(styled) == [0, "nowrap"]

    toolbar_button(lab, "Compare").click()  # pin this run as A
    assert wait_py(lab, "w.baseline is not None", "Compare pinned the run as A")
    lab.execute("with torch.no_grad(): net.gate.bias.fill_(1.0)")  # the fix: revive the gate
    toolbar_button(lab, "Run").click()
    assert wait_py(lab, "w.runs == 2", "Run from the page re-ran the model")

    # grouped bars A and B with the ratio on a second axis, the gate's change marked
    lab.page.wait_for_function(
        f"() => {PLOT}.data.length === 3 && {PLOT}.layout.barmode === 'group' && "
        f"{PLOT}.data[1].x.includes('Δ <b>gate.weight</b>')",
        timeout=60_000,
    )
    assert lab.page.locator(".js-plotly-plot .bars .point").count() >= 16
    assert lab.page.locator(".js-plotly-plot .scatterlayer .point").count() == 8
    # edges coloured by B/A, with the scale in the legend and the change listed
    lab.page.wait_for_function(
        f"() => [...document.querySelectorAll('.gvw-pane g.edge path')]"
        f".some(p => p.getAttribute('stroke') === '{REVIVED}')",
        timeout=60_000,
    )
    assert "B/A within 2x" in lab.page.locator(".gvw-legend").inner_text()
    assert "gate.weight 0.0 → healthy" in lab.page.locator(".gv-compare").inner_text()
    shot = lab.screenshot("compare_mode")
    shutil.copy(shot, ARTIFACTS / "compare.png")

    toolbar_button(lab, "Compare").click()  # leave: the normal chart and edges come back
    lab.page.wait_for_function(f"() => {PLOT}.data.length === 1", timeout=30_000)
    lab.page.wait_for_function(
        f"() => ![...document.querySelectorAll('.gvw-pane g.edge path')]"
        f".some(p => p.getAttribute('stroke') === '{REVIVED}')",
        timeout=30_000,
    )
    assert lab.page.locator(".gv-compare").count() == 0

    assert all(not is_allowed(u) for u in lab.blocked)
    errors = [m for m in lab.console if m.startswith("pageerror")]
    assert not errors, errors
