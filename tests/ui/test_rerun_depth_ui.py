"""The auto fold depth survives a re-run from another cell, in real JupyterLab at 1920x1080.

A ResNet-style CNN with its first two stages frozen opens folded for the screen. The user
scrolls down past a tall output, unfreezes the stages in a new cell and calls `ex.run()`: the
widget, scrolled off-screen, draws a bigger graph (the frozen stages now have gradients). It
must keep the depth it showed, not fold further on whatever its fresh layout measured, and
the same run again keeps it too. Screenshots go to test-artifacts/rerun_depth_*.png.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from harness import LabPage, settled, wait_until

MODEL = """import json
import torch
from torch import nn
from gradviz_widgets import GradExplorer
torch.manual_seed(0)
class Block(nn.Module):
    def __init__(s, cin, cout, stride=1):
        super().__init__()
        s.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False); s.bn1 = nn.BatchNorm2d(cout)
        s.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False); s.bn2 = nn.BatchNorm2d(cout)
        s.relu = nn.ReLU(inplace=True)
        s.short = (nn.Sequential() if (stride == 1 and cin == cout) else
                   nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)))
    def forward(s, x):
        out = s.relu(s.bn1(s.conv1(x)))
        out = s.bn2(s.conv2(out))
        return s.relu(out + s.short(x))
class TinyResNet(nn.Module):
    def __init__(s):
        super().__init__()
        s.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16),
                               nn.ReLU(inplace=True))
        s.layer1 = nn.Sequential(Block(16, 16), Block(16, 16))
        s.layer2 = nn.Sequential(Block(16, 32, 2), Block(32, 32))
        s.pool = nn.AdaptiveAvgPool2d(1); s.fc = nn.Linear(32, 10)
    def forward(s, x):
        return s.fc(s.pool(s.layer2(s.layer1(s.stem(x)))).flatten(1))
model = TinyResNet()
for p in list(model.stem.parameters()) + list(model.layer1.parameters()):
    p.requires_grad_(False)
x = torch.randn(8, 3, 32, 32); y = torch.randint(0, 10, (8,))
ex = GradExplorer(model, x, loss_fn=nn.CrossEntropyLoss(), target=y)
w = ex.show()
w"""
SPACER = """from IPython.display import HTML
HTML('<div style="height: 2600px; border: 1px dashed #999">a tall output</div>')"""
UNFREEZE = "for p in model.parameters():\n    p.requires_grad_(True)\nex.run();"
# "(folded at depth 2)", or for the auto view "(auto: folded at depth 2, leaf modules as boxes)"
SHOWN = re.compile(r"(\d+) of (\d+) nodes shown(?: \((?:auto: )?folded at depth (\d+)[^)]*\))?")

STATE = """() => {
  const root = document.querySelector('.gv-explorer');
  const v = root.querySelector('.gvw-viewport');
  const r = v.getBoundingClientRect();
  return {text: (root.textContent.match(/\\d+ of \\d+ nodes shown[^\\n]*/) || [''])[0],
          renders: v.dataset.renders || '', busy: root.querySelector('.gvw-status').dataset.level,
          top: r.top, bottom: r.bottom, inner: window.innerHeight};
}"""


def state(lab: LabPage) -> dict[str, Any]:
    return dict(lab.page.evaluate(STATE))


def shown(lab: LabPage) -> tuple[int, int, int | None]:
    """(nodes drawn, nodes in all, depth) once the widget stopped redrawing."""
    s = settled(lambda: {k: v for k, v in state(lab).items() if k in ("text", "renders", "busy")},
                timeout=60, quiet=3.0)  # fmt: skip
    m = SHOWN.search(s["text"])
    assert m, s
    return int(m[1]), int(m[2]), (int(m[3]) if m[3] else None)


def run_new_cell(lab: LabPage, source: str) -> None:
    """Add a cell at the end and run it, as a user does (the notebook scrolls to it)."""
    lab.page.evaluate(
        """(source) => { const app = window.jupyterapp; const nb = app.shell.currentWidget.content;
            nb.activeCellIndex = nb.widgets.length - 1;
            return app.commands.execute('notebook:insert-cell-below').then(() => {
              nb.activeCell.model.sharedModel.setSource(source);
              return app.commands.execute('notebook:run-cell'); }); }""",
        source,
    )


@pytest.mark.ui
def test_a_rerun_off_screen_keeps_the_auto_depth(browser: Any, lab_server: Any) -> None:
    context = browser.new_context(viewport={"width": 1920, "height": 1080})
    context.set_default_timeout(30_000)
    lab = LabPage(lab_server, context.new_page())
    try:
        lab.notebook("rerun_depth.ipynb", [MODEL, SPACER])
        lab.open_notebook("rerun_depth.ipynb")
        lab.run_all()
        lab.page.wait_for_function(
            "() => document.querySelectorAll('.gv-explorer .gvw-viewport > svg g.node').length",
            timeout=180_000,
        )
        drawn, total, depth = shown(lab)
        assert depth is not None and drawn < total, (drawn, total, depth)  # folded for the screen
        lab.screenshot("rerun_depth_first")

        run_new_cell(lab, UNFREEZE)  # the notebook scrolls down to the new cell
        try:
            wait_until(lambda: (m := SHOWN.search(state(lab)["text"])) and int(m[2]) > total,
                       90, "the re-run's bigger graph")  # fmt: skip
        finally:
            lab.screenshot("rerun_depth_after_unfreeze_first")
        s = state(lab)
        assert s["bottom"] < 0 or s["top"] > s["inner"], s  # it was drawn off-screen
        drawn2, total2, depth2 = shown(lab)
        lab.screenshot("rerun_depth_after_unfreeze")
        assert total2 > total and depth2 == depth, (drawn, total, depth, drawn2, total2, depth2)

        run_new_cell(lab, "ex.run();")  # the same graph again
        lab.page.wait_for_timeout(1500)
        assert shown(lab) == (drawn2, total2, depth2)
        lab.page.evaluate("() => document.querySelector('.gv-explorer').scrollIntoView()")
        lab.page.wait_for_timeout(1500)
        assert shown(lab) == (drawn2, total2, depth2)  # back on screen: still the same
        lab.screenshot("rerun_depth_scrolled_back")
    finally:
        lab.save_logs("test_a_rerun_off_screen_keeps_the_auto_depth")
        context.close()
