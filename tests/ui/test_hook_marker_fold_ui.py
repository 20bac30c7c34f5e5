"""A hook stays visible when the graph is folded, in real JupyterLab + headless Chromium.

Found from outside: a click on a ReLU node inside layer2.0 of a small ResNet turned a backward
hook on (marker and status said so); after "fold at" 0 and Run the folded layer2 node had no
marker and the status line no longer named the hook, though the readout showed it firing.
"""

from __future__ import annotations

import json

import pytest
from harness import LabPage, is_allowed, py, wait_until

CELLS = [
    """import json
import torch
import torch.nn.functional as F
from torch import nn
from gradviz_widgets import GradExplorer

class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
    def forward(self, x):
        return F.relu(self.conv2(F.relu(self.conv1(x))) + x)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 1, 1)
        self.layer1 = nn.Sequential(Block(8), Block(8))
        self.layer2 = nn.Sequential(Block(8), Block(8))
        self.fc = nn.Linear(8, 3)
    def forward(self, x):
        return self.fc(self.layer2(self.layer1(self.stem(x))).mean((2, 3)))

torch.manual_seed(0)
ex = GradExplorer(Net(), torch.randn(2, 3, 8, 8), loss_fn=nn.CrossEntropyLoss(),
                  target=torch.tensor([0, 2]))
w = ex.show(depth="full")
w"""
]
HOOKED = "() => [...document.querySelectorAll('.gvw-pane g.node.hooked')].map(g => g.dataset.key)"
STATUS = "() => document.querySelector('.gvw-status')?.innerText ?? ''"


def key_of(lab: LabPage, node_id: str) -> str:
    return str(py(lab, f"next(k for k, v in w.pane.key_map.items() if v == {node_id!r})"))


@pytest.mark.ui
def test_a_hook_survives_folding_the_graph(lab: LabPage) -> None:
    lab.notebook("hook_fold_ui.ipynb", CELLS)
    lab.open_notebook("hook_fold_ui.ipynb")
    lab.page.evaluate("() => window.jupyterapp.shell.collapseLeft()")  # the file browser off
    lab.run_all()
    lab.page.wait_for_selector(".gvw-pane g.node", timeout=120_000)
    wait_until(lambda: py(lab, "w.runs >= 1 and bool(w.pane.nodes)"), 90, "the first view")
    relu = py(lab, "next(n.id for n in w.view.nodes if n.module == 'layer2.0' and 'Relu' in n.op)")
    node = lab.page.locator(f".gvw-pane g.node[data-key={json.dumps(key_of(lab, relu))}]")
    lab.execute(f"w.selected = {relu!r}")  # the page centres a selected node it has off screen
    lab.page.wait_for_function(
        "(g) => g.classList.contains('gvw-selected')", arg=node.element_handle(), timeout=30_000
    )
    node.scroll_into_view_if_needed()
    node.click()
    wait_until(lambda: py(lab, "ex.hooks") == [["layer2.0", "backward"]], 60, "the hook on")
    lab.page.wait_for_function(f"() => ({HOOKED})().length > 0", timeout=60_000)
    assert "backward hook on at layer2.0" in lab.page.evaluate(STATUS)

    # "fold at" 0, then Run: the folded layer2 holds the hook and shows it
    depth = next(
        s
        for s in lab.page.locator(".gv-explorer select").all()
        if "full" in s.evaluate("s => [...s.options].map(o => o.text).join()")
    )
    depth.select_option(label="0")
    wait_until(lambda: py(lab, "w.depth") == 0, 60, "the fold at depth 0")
    runs = py(lab, "w.runs")
    lab.page.locator(".gv-explorer button.mod-primary").first.click()
    wait_until(lambda: py(lab, "w.runs") == runs + 1, 60, "the re-run")
    layer2 = key_of(lab, "module:layer2")
    lab.page.wait_for_function(
        f"() => ({HOOKED})().join() === {json.dumps(layer2)}", timeout=60_000
    )
    g = lab.page.locator(f".gvw-pane g.node[data-key={json.dumps(layer2)}]")
    assert g.locator(".gvw-hook-badge").count() == 1
    assert "hooked: backward at layer2.0" in g.locator(":scope > title").text_content()
    # the tooltip names the hooked module
    g.scroll_into_view_if_needed()
    g.hover()
    tip = lab.page.locator(".gvw-tooltip")
    wait_until(lambda: tip.is_visible(), 10, "the tooltip")
    assert "backward at layer2.0" in tip.inner_text()
    status = lab.page.evaluate(STATUS)
    assert "hooks on: backward at layer2.0" in status
    assert not status.startswith("ran in") and "gradients" in status.split(";")[0]
    lab.page.locator(".gvw-pane").first.scroll_into_view_if_needed()
    lab.screenshot("hook_marker_fold")

    # a hook on layer2 itself, drawn open at depth 1: its frame carries the marker
    lab.execute("ex.set_hook('layer2.0', on=False); ex.set_hook('layer2', on=True); ex.run()")
    depth.select_option(label="1")
    wait_until(lambda: py(lab, "w.depth") == 1, 60, "the fold at depth 1")
    frame = lab.page.locator(".gvw-pane g.cluster.hooked")
    wait_until(lambda: frame.count() == 1, 60, "the hooked frame")
    assert frame.locator(":scope > title").text_content() == "layer2 — hooked: backward at layer2"
    assert frame.locator(":scope > .gvw-hook-badge").count() == 1
    assert lab.page.evaluate(f"() => ({HOOKED})()") == []  # no node of its own to mark
    lab.screenshot("hook_marker_frame")

    assert all(not is_allowed(u) for u in lab.blocked)
    errors = [m for m in lab.console if m.startswith("pageerror")]
    assert not errors, errors
