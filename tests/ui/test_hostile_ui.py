"""Hostile names in real JupyterLab + headless Chromium: no script runs, every drawn node
resolves to its Python id, a click on a hostile-named node hooks it in Python, and an error
raised in backward shows in the status line and ends the busy state."""

from __future__ import annotations

import json
from typing import Any

import pytest
from harness import LabPage, py, wait_until

CELLS = [
    r"""import json
import torch
from torch import nn
from gradviz_widgets import GradExplorer

MARKUP = "<img src=x onerror=alert(1)>"
NAMES = [MARKUP, 'q"uo\'te', "back\\slash", "new\nline", "cr\rret", "nul\x00x", "esc\x1bx",
         "vt\x0bx", "&amp;lt;", "rtl\u202eevil", "at@1", "br{a}ce", "中文"]
OUT_KEY = "<b>out</b><script>alert(2)</script>"


class Boom(torch.autograd.Function):
    armed = False

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        if Boom.armed:
            raise ValueError("backward refused on purpose")
        return g


class Hostile(nn.Module):
    def __init__(self):
        super().__init__()
        for name in NAMES:
            self.add_module(name, nn.Linear(3, 3))

    def forward(self, x):
        for module in self._modules.values():
            x = torch.tanh(module(x))
        return {OUT_KEY: Boom.apply(x).square().mean()}


def loss(out):
    return out[OUT_KEY]


loss.__name__ = "<svg onload=alert(3)>"
ex = GradExplorer(Hostile(), torch.randn(4, 3), loss_fn=loss)
w = ex.show(depth=None)
MARKUP_OP = next(n.id for n in w.view.nodes if n.module == MARKUP and n.kind == "op")""",
    "w",
]


def wait_py(lab: LabPage, expr: str, what: str, timeout: float = 60) -> Any:
    return wait_until(lambda: py(lab, expr), timeout, what, interval=0.3)


@pytest.mark.ui
def test_hostile_names_in_jupyterlab(lab: LabPage) -> None:
    dialogs: list[str] = []
    lab.page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    lab.notebook("hostile_ui.ipynb", CELLS)
    lab.open_notebook("hostile_ui.ipynb")
    lab.run_all()

    expected = wait_py(lab, "'w' in globals() and len(w.pane.nodes)", "widget built")
    lab.page.wait_for_function(
        f"() => document.querySelectorAll('.gvw-pane svg g.node').length === {expected}",
        timeout=90_000,
    )
    # every drawn node and cluster resolves, through the key map, to a Python id
    keys = py(lab, "w.pane.key_map")
    drawn = lab.page.eval_on_selector_all(
        ".gvw-pane svg g.node", "els => els.map(e => e.dataset.key)"
    )
    assert drawn and all(k in keys for k in drawn)
    assert {keys[k] for k in drawn} == set(py(lab, "list(w.pane.nodes)"))
    clusters = lab.page.eval_on_selector_all(
        ".gvw-pane svg g.cluster", "els => els.map(e => e.dataset.key)"
    )
    assert len(clusters) >= 13 and all(k.removeprefix("cluster_") in keys for k in clusters)

    # user text shows as text: the loss line, tooltips, plotly ticks; nothing became markup
    toolbar = lab.page.locator(".gv-loss-line").inner_text()
    assert "<svg onload=alert(3)>" in toolbar, toolbar
    key = py(lab, "next(k for k, v in w.pane.key_map.items() if v == MARKUP_OP)")
    markup_node = lab.page.locator(f'.gvw-pane g.node[data-key="{key}"]')
    markup_node.hover()
    tooltip = lab.page.locator(".gvw-tooltip")
    tooltip.wait_for(state="visible", timeout=5_000)
    assert "<img src=x onerror=alert(1)>" in tooltip.inner_text()
    lab.page.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot :is(.xtick, .xtick2, .ytick) text')]"
        # shown as text (a long name is elided in the middle: its ends stay; bars that lie flat
        # carry their names on the y axis)
        ".some(t => t.textContent.startsWith('<img') && t.textContent.includes('(1)>'))",
        timeout=60_000,
    )
    assert (
        lab.page.evaluate("() => document.querySelectorAll('img[src=\"x\"], svg[onload]').length")
        == 0
    )

    # a click on the hostile-named node hooks that module in Python, and the page shows it
    markup_node.click()
    assert wait_py(lab, "[list(h) for h in ex.hooks] == [[MARKUP, 'backward']]", "hook toggled")
    lab.page.wait_for_function(
        f"() => document.querySelector('.gvw-pane g.node[data-key=\"{key}\"]')"
        "?.classList.contains('hooked')",
        timeout=30_000,
    )
    # keyboard: Enter on the focused node clicks it (the hook goes off again)
    lab.page.locator(f'.gvw-pane g.node[data-key="{key}"]').focus()
    lab.page.keyboard.press("Enter")
    assert wait_py(lab, "ex.hooks == []", "hook toggled off by Enter")

    # an error raised in backward: shown in the status line, busy ends, Python and page agree
    box = lab.page.locator(".gvw-viewport").bounding_box()
    lab.execute("Boom.armed = True")
    lab.page.locator(f'.gvw-pane g.node[data-key="{key}"]').click()
    lab.page.wait_for_function(
        "() => document.querySelector('.gvw-status')?.dataset.level === 'error'", timeout=60_000
    )
    # the long error text stays on one line: the graph does not move under the mouse
    assert lab.page.locator(".gvw-viewport").bounding_box() == box
    status = lab.page.locator(".gvw-status")
    assert "ValueError: backward refused on purpose" in (status.get_attribute("title") or "")
    assert py(lab, "[ex.hooks, w.guard.busy]") == [[], False]
    assert "hooked" not in (
        lab.page.locator(f'.gvw-pane g.node[data-key="{key}"]').get_attribute("class") or ""
    )
    lab.screenshot("hostile_after_error")
    lab.execute("Boom.armed = False")

    assert dialogs == [], dialogs
    errors = [m for m in lab.console if m.startswith("pageerror")]
    assert not errors, json.dumps(errors)[:2000]
