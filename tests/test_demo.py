"""The README's headless command: a standalone page, the graph as SVG, the norms as CSV/JSON."""

from __future__ import annotations

import csv
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from gradviz_widgets.demo import _JS_DIR, main

needs_layout = pytest.mark.skipif(
    shutil.which("dot") is None and not (_JS_DIR / "node_modules" / "@viz-js" / "viz").exists(),
    reason="neither system Graphviz nor js/node_modules for WASM Graphviz",
)


@needs_layout
def test_headless_demo_writes_page_svg_and_tables(tmp_path, capsys):
    assert main([str(tmp_path)]) == 0
    svg = (tmp_path / "graph.svg").read_text()
    assert "<svg" in svg and "gate.weight" in svg and svg.count('class="node"') > 20
    rows = {r["name"]: r for r in csv.DictReader((tmp_path / "grad_norms.csv").open())}
    assert (
        rows["gate.weight"]["status"] == "zero"
        and round(float(rows["main2.weight"]["norm"]), 4) == 0.2938
    )
    report = json.loads((tmp_path / "grad_report.json").read_text())
    assert any("exactly 0.0" in f for f in report["findings"])
    page = (tmp_path / "index.html").read_text()
    assert 'id="gvw-bundle"' in page and 'class="bar"' in page and "exactly 0.0" in page
    assert "https://" not in page.replace("http://www.w3.org/", "")
    assert "index.html" in capsys.readouterr().out


# ---- the quickstart the demo opens: right whether or not the learner clicks ----------------------

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "notebooks" / "quickstart.ipynb"
CLICK = 'widget.click_node("gate/AddmmBackward0#0")  # what a click on the gate node does'
ASKS_FOR_CLICK = "quickstart-10"  # "Hook the gate: click it"
OFFERS_SECOND_CLICK = (
    "quickstart-12"  # "Turn the hook off again (a second click, or the same call)"
)


def run_notebook(nb, cwd: Path, tmp_path: Path):
    """Execute `nb` in `cwd` in a kernel of this interpreter (the repository on PYTHONPATH)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager

    spec_dir = tmp_path / "kernels" / "gradviz-demo-test"
    spec_dir.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "gradviz demo test",
                "language": "python",
                "env": {"PYTHONPATH": path},
            }
        )
    )
    km = AsyncKernelManager(
        kernel_name="gradviz-demo-test",
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")]),
    )
    client = nbclient.NotebookClient(
        nb, km=km, timeout=120, resources={"metadata": {"path": str(cwd)}}
    )
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as err:
        pytest.fail(f"quickstart failed:\n{str(err)[-3000:]}", pytrace=False)
    return nb


def with_cells_after(nb, after: dict[str, str], end: str = ""):
    """`nb` with a code cell inserted after each markdown cell id in `after` (and one at the end)."""
    cells = []
    ids = {c.get("id") for c in nb.cells}
    assert set(after) <= ids, f"the quickstart lost cells {set(after) - ids}"
    for c in nb.cells:
        cells.append(c)
        if c.get("id") in after:
            cells.append(nbformat.v4.new_code_cell(after[c["id"]]))
    if end:
        cells.append(nbformat.v4.new_code_cell(end))
    nb.cells = cells
    return nb


# after the learner's click, the hook's record must be what "What the hook shows" describes
HOOK_SHOWS_DEAD_GATE = """
(ev,) = ex.events
(g_out,) = ev.tensors["grad_output"]
assert (ev.target, ev.kind) == ("gate", "backward")
assert g_out.shape == (6, 4) and g_out.norm == 0.0 and g_out.min == g_out.max == 0.0, g_out
assert ev.tensors["grad_input"] == (None,)
assert "grad_output" in widget.readout.value
"""


@pytest.mark.notebooks
def test_quickstart_cell_by_cell_with_the_click_it_asks_for(tmp_path):
    """The learner clicks the gate where the text asks, then runs the next cells: the check
    cell still holds (the code cell must not undo the click)."""
    nb = nbformat.read(QUICKSTART, as_version=4)
    run_notebook(
        with_cells_after(nb, {ASKS_FOR_CLICK: CLICK + "\n" + HOOK_SHOWS_DEAD_GATE}),
        QUICKSTART.parent,
        tmp_path,
    )


@pytest.mark.notebooks
def test_quickstart_with_both_clicks(tmp_path):
    """A click to hook the gate, and the second click the text offers to turn it off."""
    nb = nbformat.read(QUICKSTART, as_version=4)
    run_notebook(
        with_cells_after(nb, {ASKS_FOR_CLICK: CLICK, OFFERS_SECOND_CLICK: CLICK}),
        QUICKSTART.parent,
        tmp_path,
    )


@pytest.mark.notebooks
def test_quickstart_click_after_run_all_shows_what_the_text_says(tmp_path):
    """Run All first, then the click the text asks for: the widget's readout is the dead gate's
    all-zero grad_output, as the lesson says, not the revived gate."""
    nb = nbformat.read(QUICKSTART, as_version=4)
    run_notebook(
        with_cells_after(nb, {}, end=CLICK + "\n" + HOOK_SHOWS_DEAD_GATE),
        QUICKSTART.parent,
        tmp_path,
    )
