"""The explorer's toolbar is compact: at 1280x800 it takes at most two rows of controls in
JupyterLab (file browser open and closed) and in Notebook 7, one row at 1920x1080, for the
quickstart and for a transformers GPT-2 (built from a config, loss from ``labels=``). The rarely
used controls (modifier, thresholds, downloads) sit behind the "more" toggle; opened, every
control is on the page, labelled, not cut, and works (a threshold typed there reaches the
kernel; a download button downloads).

Rows are counted from the page: the distinct tops of the controls' bounding boxes.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import pytest
from harness import ARTIFACTS, JupyterLabServer, LabPage, sized_page, wait_until

QUICKSTART = """import json
from torch import nn
from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example
net, x, y = dead_branch_example()
ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
ex.show()"""
GPT2 = """import torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
gpt = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=32))
ids = torch.randint(0, 100, (2, 8))
ex2 = GradExplorer(gpt, {"input_ids": ids, "labels": ids})
ex2.show()"""
#: every control's visible label (a button's text, an input's description)
LABELS = {
    "Run", "device", "click hooks", "clear hooks", "fold at", "chart", "Compare", "more",
    "modifier", "value", "apply to selected", "vanishing <", "exploding >", "SVG", "CSV", "JSON",
}  # fmt: skip
# the toolbar's controls (a toggle group counts once), the rows their tops make (tops within
# 12 px are one row: a text field sits a pixel off a menu), the labels of those drawn, and
# the labels or buttons cut
ROWS = """(root) => {
  const tb = root.querySelector('.gv-toolbar');
  const controls = [...tb.querySelectorAll(
      '.widget-dropdown, .widget-button, .widget-toggle-button, .widget-toggle-buttons, .widget-text')]
    .filter(e => !e.parentElement.closest('.widget-toggle-buttons'));
  const shown = controls.filter(e => e.offsetParent !== null && e.getBoundingClientRect().width > 0);
  const tops = shown.map(e => e.getBoundingClientRect().top).sort((a, b) => a - b);
  const rows = [];
  for (const t of tops) if (!rows.length || t > rows[rows.length - 1] + 12) rows.push(t);
  const label = e => (e.querySelector(':scope > .widget-label')?.textContent
    ?? e.textContent).trim();
  const cut = [...tb.querySelectorAll('.widget-label, button')]
    .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
    .map(e => e.textContent.trim());
  const r = tb.getBoundingClientRect(), cell = root.getBoundingClientRect();
  return {rows: rows.length, labels: shown.map(label), cut, all: controls.length,
          inside: r.left >= cell.left - 1 && r.right <= cell.right + 1};
}"""


def toolbar(lab: LabPage, index: int) -> dict[str, Any]:
    return lab.page.locator(".gv-explorer").nth(index).evaluate(ROWS)


def both_drawn(lab: LabPage) -> None:
    lab.page.wait_for_function(
        "() => document.querySelectorAll('.gv-explorer').length === 2 && [...document"
        ".querySelectorAll('.gv-explorer')].every(e => e.querySelector('.gvw-viewport svg g.node'))",
        timeout=240_000,
        polling=300,
    )


def check_rows(lab: LabPage, at_most: int, where: str) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for i, model in enumerate(("quickstart", "gpt2")):
        found = toolbar(lab, i)
        facts[model] = found
        assert found["rows"] <= at_most, (where, model, found)
        assert found["cut"] == [] and found["inside"], (where, model, found)
        # closed: the primary controls and the toggle, the rest behind it
        assert "more" in found["labels"] and "vanishing <" not in found["labels"], found
    return facts


def record(key: str, facts: dict[str, Any]) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "toolbar_rows.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**old, key: facts}, indent=1))


def open_more_and_use_it(lab: LabPage, where: str) -> None:
    """Open "more" on the quickstart: every control shows, labelled, in at most 3 rows; a
    threshold typed there reaches the kernel; the CSV button downloads."""
    root = lab.page.locator(".gv-explorer").first
    root.locator(".gv-more-toggle").click()
    lab.page.wait_for_function(
        "(r) => r.querySelector('.gv-toolbar.gv-more-open')", arg=root.element_handle()
    )
    found = toolbar(lab, 0)
    record(f"{where}_more_open", found)
    assert set(found["labels"]) == LABELS and len(found["labels"]) == found["all"], found
    assert found["rows"] <= 3 and found["cut"] == [], found
    lab.screenshot(f"toolbar_rows_{where}_more")
    field = root.locator(".widget-text", has_text="vanishing <").locator("input")
    field.fill("1e-06")
    field.press("Enter")
    wait_until(
        lambda: "1e-06" in lab.execute("print(ex.thresholds.vanishing)"), 60, "the threshold"
    )
    with lab.page.expect_download(timeout=60_000) as download:
        root.locator(".gv-toolbar button", has_text="CSV").click()
    assert download.value.suggested_filename == "grad_norms.csv"
    root.locator(".gv-more-toggle").click()  # closed again: back to the primary controls
    wait_until(lambda: "vanishing <" not in toolbar(lab, 0)["labels"], 10, "more closed")


@pytest.fixture
def sized(
    lab_server: JupyterLabServer, browser: Any, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """make(width, height): a page of that size on the lab."""
    with contextlib.ExitStack() as pages:

        def make(width: int, height: int) -> LabPage:
            return pages.enter_context(
                sized_page(lab_server, browser, (width, height), request.node.name)
            )

        yield make


def run_notebook(lab: LabPage, name: str) -> None:
    lab.notebook(name, [QUICKSTART, GPT2])
    lab.open_notebook(name)
    lab.page.evaluate("() => window.jupyterapp.shell.activateById('filebrowser')")
    lab.run_all()
    both_drawn(lab)


@pytest.mark.ui
def test_toolbar_takes_two_rows_at_1280_and_one_at_1920(sized: Any) -> None:
    lab = sized(1280, 800)
    run_notebook(lab, "toolbar_rows_1280.ipynb")
    assert lab.page.locator("#filebrowser").is_visible()
    record("lab_1280_files_open", check_rows(lab, 2, "lab 1280x800, file browser open"))
    lab.screenshot("toolbar_rows_1280_files_open")
    open_more_and_use_it(lab, "lab_1280")
    lab.page.evaluate("() => window.jupyterapp.commands.execute('application:toggle-left-area')")
    wait_until(lambda: not lab.page.locator("#filebrowser").is_visible(), 10, "files closed")
    lab.page.wait_for_timeout(500)  # the cells' widths settle
    record("lab_1280_files_closed", check_rows(lab, 2, "lab 1280x800, file browser closed"))

    wide = sized(1920, 1080)
    run_notebook(wide, "toolbar_rows_1920.ipynb")
    record("lab_1920_files_open", check_rows(wide, 1, "lab 1920x1080, file browser open"))
    wide.screenshot("toolbar_rows_1920")


@pytest.fixture(scope="module")
def nb7_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLabServer]:
    """Notebook 7's server (the class test_notebook7_ui.py starts it with)."""
    from test_notebook7_ui import NotebookServer, _notebook_version

    if _notebook_version() < (7,):
        pytest.skip("needs Notebook 7 (notebook>=7)")
    server = NotebookServer(tmp_path_factory.mktemp("notebook7_toolbar"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.mark.ui
def test_toolbar_takes_two_rows_at_1280_in_notebook7(
    nb7_server: JupyterLabServer, browser: Any, request: pytest.FixtureRequest
) -> None:
    with sized_page(nb7_server, browser, (1280, 800), request.node.name) as nb:
        name = "toolbar_rows_nb7.ipynb"
        nb.notebook(name, [QUICKSTART, GPT2])
        nb.open_notebook7(name)
        nb.run_all()
        both_drawn(nb)
        record("notebook7_1280", check_rows(nb, 2, "Notebook 7 1280x800"))
        nb.screenshot("toolbar_rows_notebook7_1280")
