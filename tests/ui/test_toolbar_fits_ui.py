"""The explorer's toolbar in real JupyterLab at 1280x800 with the file browser open: nothing in
the widget scrolls sideways before a click (from a teacher's try-out: the toolbar was 4 px wider
than its box, the loss line's 100% width plus its margins, so a scrollbar sat under the loss
line of every widget), and a long loss line still ends in an ellipsis."""

from __future__ import annotations

from typing import Any

import pytest
from harness import JupyterLabServer, sized_page
from test_first_view_ui import SETUP, draw, settled_facts

CELL = (
    SETUP
    + """layers = []
for i in range(6):
    layers += [nn.Linear(64, 64), nn.Sigmoid()]
sig = nn.Sequential(*layers, nn.Linear(64, 10))
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
def a_cross_entropy_loss_whose_name_is_long_enough_to_need_an_ellipsis_in_the_loss_line(o, t):
    return nn.functional.cross_entropy(o, t)
loss = a_cross_entropy_loss_whose_name_is_long_enough_to_need_an_ellipsis_in_the_loss_line
ex_sig = GradExplorer(sig, x, loss_fn=loss, target=y)
w_sig = ex_sig.show()"""
)
# every element of the widget that would show a horizontal scrollbar
SCROLLING = """(root) => [...root.querySelectorAll('*')].filter(e => {
  const s = getComputedStyle(e);
  return e.scrollWidth > e.clientWidth + 1 && (s.overflowX === 'auto' || s.overflowX === 'scroll');
}).map(e => [String(e.className), e.scrollWidth, e.clientWidth])"""
LINE = """(e) => { const inner = e.querySelector('.gv-loss-line') || e;
  return {scroll: inner.scrollWidth, client: inner.clientWidth,
          ellipsis: getComputedStyle(inner).textOverflow,
          right: e.getBoundingClientRect().right,
          box: e.closest('.gv-toolbar').getBoundingClientRect().right}; }"""


@pytest.mark.ui
def test_nothing_scrolls_sideways_and_a_long_loss_line_is_cut(
    lab_server: JupyterLabServer, browser: Any
) -> None:
    with sized_page(lab_server, browser, (1280, 800), "toolbar_fits") as lab:
        draw(lab, "toolbar_fits.ipynb", [CELL, "w_sig"])
        settled_facts(lab)
        root = lab.page.locator(".gv-explorer").first
        lab.screenshot("toolbar_fits_1280")
        assert root.evaluate(SCROLLING) == []
        line = root.locator(".gv-loss-line").first.evaluate(LINE)
        assert line["scroll"] > line["client"] and line["ellipsis"] == "ellipsis", line
        assert line["right"] <= line["box"] + 1, line
