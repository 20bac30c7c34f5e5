"""The explorer in JupyterLab's dark theme (an outside try-out): the legend's swatches for
"exactly 0.0" and "hooked" (dark strokes) vanished into the dark page. The legend now sits on
the graph's own white, as what it explains is drawn there."""

from __future__ import annotations

import pytest
from harness import LabPage, py, wait_until

CELLS = [
    """import json
from torch import nn
from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example
net, x, y = dead_branch_example()
ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
w = ex.show()
w"""
]

MEASURE = """() => {
  const legend = document.querySelector('.gvw-legend');
  const viewport = document.querySelector('.gvw-viewport');
  const hooked = legend.querySelector('[data-status="hooked"] rect');
  return {legend: getComputedStyle(legend).backgroundColor,
          text: getComputedStyle(legend).color,
          graph: getComputedStyle(viewport).backgroundColor,
          page: getComputedStyle(document.body).backgroundColor,
          hooked: hooked.getAttribute('stroke')};
}"""


@pytest.mark.ui
def test_the_legend_reads_in_the_dark_theme(small_lab: LabPage) -> None:
    lab = small_lab
    lab.notebook("dark_theme_ui.ipynb", CELLS)
    lab.open_notebook("dark_theme_ui.ipynb")
    lab.page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme', "
        "{theme: 'JupyterLab Dark'})"
    )
    lab.run_all()
    lab.page.wait_for_selector(".gvw-legend [data-status='hooked']", timeout=120_000)
    wait_until(lambda: py(lab, "w.runs >= 1"), 90, "the first run")
    wait_until(
        lambda: lab.page.evaluate("() => document.body.dataset.jpThemeLight") == "false",
        30,
        "the dark theme",
    )
    m = lab.page.evaluate(MEASURE)
    assert m["page"] != "rgb(255, 255, 255)", m  # the page is dark ...
    assert m["legend"] == m["graph"] == "rgb(255, 255, 255)", m  # ... the legend as the graph
    assert m["text"] == "rgb(34, 34, 34)", m
    lab.screenshot("dark_theme_legend", ".gvw-pane")
    lab.page.evaluate(
        "() => window.jupyterapp.commands.execute('apputils:change-theme', "
        "{theme: 'JupyterLab Light'})"
    )
