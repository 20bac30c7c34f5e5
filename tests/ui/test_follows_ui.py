"""The widget follows the explorer in real JupyterLab + headless Chromium (issue 20): the
quickstart's cell order (show the widget, then turn a hook on and off from code and run) shows
the change in the open widget: the hook marker on the gate's node comes and goes."""

from __future__ import annotations

import pytest
from harness import LabPage, is_allowed, py, wait_until

CELLS = [
    """import json
from torch import nn
from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example

net, x, y = dead_branch_example()
ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
w = ex.show()
w""",
    """print("hook on:", ex.set_hook("gate", on=True))
hooked = ex.run()""",
]
HOOKED = "() => [...document.querySelectorAll('.gvw-pane g.node.hooked')].map(g => g.dataset.key)"


def gate_key(lab: LabPage) -> str:
    return py(lab, "next(k for k, v in w.pane.key_map.items() if v == 'gate/AddmmBackward0#0')")


@pytest.mark.ui
def test_hooks_changed_from_code_show_in_the_open_widget(lab: LabPage) -> None:
    lab.notebook("follows_ui.ipynb", CELLS)
    lab.open_notebook("follows_ui.ipynb")
    lab.run_all()
    # the hook turned on from code after show(): the page marks the gate's node
    wait_until(lambda: py(lab, "w.runs == 2"), 90, "the widget drew the run made from code")
    gate = gate_key(lab)
    lab.page.wait_for_function(f"() => ({HOOKED})().includes('{gate}')", timeout=90_000)
    status = "__import__('gradviz_widgets.widget.controller', fromlist=['x']).status_line"
    assert py(lab, f"w.status_text == {status}(ex.report, ex.hooks, ex.modifiers)")
    lab.screenshot("follows_hook_on")

    # the next cell turns it off (no run yet): the marker goes, the status line says so
    lab.execute('print("hook on:", ex.set_hook("gate", on=False))')
    lab.page.wait_for_function(f"() => ({HOOKED})().length === 0", timeout=30_000)
    lab.page.wait_for_function(
        "() => document.querySelector('.gvw-status')?.innerText.includes('no hooks on')",
        timeout=30_000,
    )
    # and a run from code draws the new run, with no hook anywhere
    lab.execute("report = ex.run()")
    wait_until(lambda: py(lab, "w.runs == 3"), 60, "the widget drew the second run from code")
    lab.page.wait_for_function(
        "() => !document.querySelector('.gvw-status')?.innerText.includes('no hooks on')",
        timeout=30_000,
    )
    assert lab.page.locator(".gvw-pane g.node.hooked").count() == 0
    assert "backward hook" not in lab.page.locator(".gvw-status").inner_text()
    lab.screenshot("follows_hook_off")

    assert all(not is_allowed(u) for u in lab.blocked)
    errors = [m for m in lab.console if m.startswith("pageerror")]
    assert not errors, errors
