"""The hook readout of a wide table (a GPT-2 layer's grad_input / grad_output) in real
JupyterLab at 1280x800 with the file browser open, the chart under the graph: the table stays
inside the cell and scrolls sideways (from outside: its last column read "m" for "ms")."""

from __future__ import annotations

from typing import Any

import pytest
from harness import JupyterLabServer, sized_page
from test_first_view_ui import MODELS, draw, settled_facts

# the readout against the cell it sits in
READOUT = """(root) => {
  const box = root.querySelector('.gv-readout');
  const cell = (root.closest('.jp-OutputArea-output') || root.parentElement).getBoundingClientRect();
  const b = box.getBoundingClientRect();
  const table = box.querySelector('table');
  const html = box.closest(".widget-html").getBoundingClientRect();
  const content = box.parentElement.getBoundingClientRect();
  return {overflow: getComputedStyle(box).overflowX, right: b.right, cell_right: cell.right, html_right: html.right, content_right: content.right, root_right: root.getBoundingClientRect().right,
          scroll_w: box.scrollWidth, client_w: box.clientWidth,
          table_w: table ? table.getBoundingClientRect().width : 0,
          last_header: table ? table.querySelector('tr th:last-child').textContent : ''};
}"""


@pytest.mark.ui
def test_a_wide_readout_scrolls_inside_its_cell(lab_server: JupyterLabServer, browser: Any) -> None:
    with sized_page(lab_server, browser, (1280, 800), "readout_wide") as lab:
        cells = [MODELS["gpt2"], "w", 'w.click_node("transformer/AddBackward0#0")']
        draw(lab, "readout_wide.ipynb", cells)
        settled_facts(lab)
        root = lab.page.locator(".gv-explorer").first
        lab.page.wait_for_function(
            "() => document.querySelector('.gv-explorer .gv-readout table')", timeout=60_000
        )
        facts = root.evaluate(READOUT)
        lab.screenshot("readout_wide_1280")
        assert facts["last_header"] == "ms", facts
        assert facts["right"] <= facts["cell_right"] + 1, facts  # inside the cell
        if facts["table_w"] > facts["client_w"] + 1:  # wider than its box: it scrolls
            assert facts["overflow"] in ("auto", "scroll"), facts
            assert facts["scroll_w"] >= facts["table_w"] - 1, facts
