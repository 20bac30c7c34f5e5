"""The explorer in Jupyter Notebook 7 (the ``notebook`` package's server, /notebooks/...) in
headless Chromium: the graph SVG and the chart's bars appear, a click on the gate's node turns
a backward hook on in the kernel (read back from a cell's output in the page).

Only user-visible behaviour is checked, so the test survives reworks of the widget's insides.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from harness import ARTIFACTS, CHROMIUM, JupyterLabServer, LabPage, settled, sized_page, wait_until

CELLS = [
    """from torch import nn
from gradviz_widgets import GradExplorer
from gradviz_widgets.examples import dead_branch_example

net, x, y = dead_branch_example()
ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)
ex.show()""",
    'print("HOOKS", sorted(tuple(h) for h in ex.hooks))',
]
GATE_HOOKED = "HOOKS [('gate', 'backward')]"
# the gate's op node: its accessible name is "AddmmBackward0, <status>, module gate"
GATE_SELECTOR = '.gvw-pane g.node[aria-label^="AddmmBackward0"][aria-label*="module gate"]'
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _notebook_version() -> tuple[int, ...]:
    nb = pytest.importorskip(
        "notebook", reason="Notebook 7 is not installed (pip install 'notebook>=7')"
    )
    return tuple(int(p) for p in nb.__version__.split(".")[:2] if p.isdigit())


class NotebookServer(JupyterLabServer):
    """``jupyter notebook`` (Notebook 7) in the same throw-away environment as the lab tests."""

    def start(self, timeout: float = 120) -> None:
        env = self.environment()
        self.prepare(env)
        self.log_path = self.base / "notebook.log"
        cmd = [
            sys.executable, "-m", "notebook", "--no-browser", "--allow-root",
            "--ServerApp.ip=127.0.0.1", f"--port={self.port}", "--port-retries=0",
            f"--ServerApp.token={self.token}", f"--ServerApp.root_dir={self.root}",
            "--JupyterNotebookApp.expose_app_in_browser=True",
        ]  # fmt: skip
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                cmd, env=env, cwd=self.root, stdout=log, stderr=subprocess.STDOUT
            )
        wait_until(self._answers, timeout, f"Notebook 7 on port {self.port}", interval=0.3)

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"jupyter notebook exited ({self.proc.returncode}):\n{self.log_tail()}"
            )
        try:
            with _NO_PROXY.open(f"{self.url}/api/status?token={self.token}", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False


@pytest.fixture(scope="module")
def nb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NotebookServer]:
    if _notebook_version() < (7,):
        pytest.skip("needs Notebook 7 (notebook>=7)")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (set GRADVIZ_CHROMIUM)")
    server = NotebookServer(tmp_path_factory.mktemp("notebook7"))
    try:
        server.start()
        yield server
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "notebook7-start.log").write_text(server.log_tail(20000), encoding="utf-8")
        raise
    finally:
        server.stop()


@pytest.fixture
def nb(
    nb_server: NotebookServer, browser: Any, request: pytest.FixtureRequest
) -> Iterator[LabPage]:
    """A page on the Notebook 7 server: non-loopback requests aborted, dialogs recorded."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(30_000)
    page = context.new_page()
    nb_page = LabPage(nb_server, page)
    dialogs: list[str] = []

    def on_dialog(dialog: Any) -> None:
        dialogs.append(f"{dialog.type}: {dialog.message}")
        nb_page.console.append(f"dialog: {dialogs[-1]}")
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page_errors: list[str] = []
    page.on("pageerror", lambda e: page_errors.append(f"{e}\n{e.stack}"))
    nb_page.page_errors = page_errors  # type: ignore[attr-defined]
    nb_page.dialogs = dialogs  # type: ignore[attr-defined]
    try:
        yield nb_page
    finally:
        nb_page.save_logs(request.node.name)
        try:
            nb_page.screenshot(f"{request.node.name}-last")
        except Exception as e:  # noqa: BLE001 - a screenshot is a diagnostic only
            print("no screenshot:", e)
        context.close()


def rerun_cell_output(nb: LabPage, index: int) -> str:
    """Run cell ``index`` again (queued behind running cells) and return its output text."""
    return str(
        nb.page.evaluate(
            """async (index) => {
                const panel = window.jupyterapp.shell.currentWidget;
                const notebook = panel.content;
                notebook.deselectAll();
                notebook.activeCellIndex = index;
                await window.jupyterapp.commands.execute('notebook:run-cell');
                const cell = notebook.widgets[index];
                return cell.node.querySelector('.jp-OutputArea')?.innerText ?? '';
            }""",
            index,
        )
    )


def notebook_own_error(error: str) -> bool:
    """Notebook 7.6's own start-up error (its shortcuts settings code reads the schema of a
    plugin it has not loaded), thrown from its core bundle before any widget loads."""
    frames = [line for line in error.splitlines() if line.strip().startswith("at ")]
    return (
        "reading 'schema'" in error
        and bool(frames)
        and "/static/notebook/notebook_core." in frames[0]
    )


def gate_node(nb: LabPage) -> Any:
    """The gate's op node: by accessible name; else any node whose visible text says gate."""
    by_name = nb.page.locator(GATE_SELECTOR)
    if by_name.count():
        return by_name.first
    return nb.page.locator(".gvw-pane g.node").filter(has_text="gate").first


@pytest.mark.ui
def test_notebook7_graph_chart_and_gate_click(nb: LabPage) -> None:
    name = "notebook7_ui.ipynb"
    nb.notebook(name, CELLS)
    nb.open_notebook7(name)
    nb.page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")

    # the graph is laid out in the browser (SVG nodes), the chart draws bars, the hook cell ran
    nb.page.wait_for_function(
        "() => document.querySelectorAll('.gvw-pane svg g.node').length > 0",
        timeout=180_000,
        polling=300,
    )
    nb.page.wait_for_function(
        "() => document.querySelectorAll('.js-plotly-plot .bars .point').length > 0",
        timeout=60_000,
        polling=300,
    )
    nb.page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-OutputArea')].some(o => o.innerText.includes('HOOKS []'))",
        timeout=60_000,
        polling=300,
    )
    nb.screenshot("notebook7_initial")

    # click the gate's node in the page; the kernel hooks the gate module
    gate_node(nb).click()
    wait_until(
        lambda: GATE_HOOKED in rerun_cell_output(nb, 1),
        90,
        "the hook cell to print the gate's backward hook",
        interval=0.5,
    )
    # ...and the page marks the hooked nodes
    nb.page.wait_for_function(
        "() => document.querySelectorAll('.gvw-pane g.node.hooked').length > 0", timeout=60_000
    )
    nb.screenshot("notebook7_after_click")

    if nb.blocked:
        print("aborted non-loopback requests:", *nb.blocked, sep="\n  ")
    errors = [e for e in nb.page_errors if not notebook_own_error(e)]  # type: ignore[attr-defined]
    assert not errors, errors
    assert not nb.dialogs, nb.dialogs  # type: ignore[attr-defined]


CNN = """import torch
from torch import nn
from gradviz_widgets import GradExplorer
torch.manual_seed(0)
def block(i, o):
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())
net = nn.Sequential(block(3, 8), block(8, 16), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                    nn.Linear(16, 10))
net[0].requires_grad_(False)   # the frozen first stage
GradExplorer(net, torch.randn(2, 3, 32, 32)).show()"""

# nodes and module frames against the graph's viewport: across it (none cut at its left or
# right edge) and whole inside it; the smallest label on screen; the chart under the graph
ACROSS = """(root) => {
  const vp = root.querySelector('.gvw-viewport');
  const v = vp.getBoundingClientRect();
  const svg = vp.querySelector(':scope > svg');
  const scale = svg.getBoundingClientRect().width / svg.width.baseVal.value;
  const across = (e) => { const b = e.getBoundingClientRect();
    return b.left >= v.left - 1 && b.right <= v.right + 1; };
  const inside = (e) => { const b = e.getBoundingClientRect();
    return across(e) && b.top >= v.top - 1 && b.bottom <= v.bottom + 1; };
  const nodes = [...svg.querySelectorAll('g.node')];
  const frames = [...svg.querySelectorAll('g.cluster')];
  const frozen = nodes.filter(n => n.textContent.includes('frozen'));
  const plot = root.querySelector('.js-plotly-plot').getBoundingClientRect();
  return {nodes: nodes.length, across: nodes.filter(across).length,
          inside: nodes.filter(inside).length, frames: frames.length,
          frames_across: frames.filter(across).length, frozen: frozen.length,
          frozen_across: frozen.filter(across).length, pane_w: v.width,
          cell_w: root.getBoundingClientRect().width, chart_below: plot.top >= v.bottom - 2,
          min_label_px: Math.min(...[...svg.querySelectorAll('g.node text')].map(
            t => parseFloat(getComputedStyle(t).fontSize))) * scale};
}"""


@pytest.mark.ui
@pytest.mark.parametrize("size", [(1280, 800), (1920, 1080)], ids=["1280x800", "1920x1080"])
def test_notebook7_first_view_of_a_small_cnn_is_whole_across(
    nb_server: NotebookServer, browser: Any, size: tuple[int, int]
) -> None:
    """Notebook 7 centres its notebook: the explorer's cell is ~1,108 px at any window size,
    just wide enough for the chart beside the graph, which left the graph 665 px. A small CNN
    whose first stage is frozen is ~740 px wide at readable labels: its first view cut the
    frozen stage off at the pane's edge. The chart goes under such a graph: the whole graph
    across the pane, every label readable, and, where the window is tall enough, all of it."""
    name = f"notebook7_cnn_{size[0]}.ipynb"
    with sized_page(nb_server, browser, size, f"notebook7_cnn_{size[0]}") as nb:
        nb.notebook(name, [CNN])
        nb.open_notebook7(name)
        nb.run_all()
        nb.page.wait_for_function(
            "() => document.querySelectorAll('.gv-explorer .gvw-viewport > svg g.node').length"
            " > 0 && document.querySelector('.gv-explorer .js-plotly-plot .bars')",
            timeout=300_000,
        )
        root = nb.page.locator(".gv-explorer").first
        root.locator(".gvw-viewport").scroll_into_view_if_needed()
        facts = settled(lambda: root.evaluate(ACROSS), timeout=30, quiet=1.5)
        nb.screenshot(f"notebook7_cnn_{size[0]}x{size[1]}")
    assert facts["frozen"] == 4 and facts["nodes"] > 10, facts
    assert facts["frozen_across"] == facts["frozen"], facts  # the frozen stage is not cut off
    assert facts["across"] == facts["nodes"], facts  # no node cut at the left or right edge
    assert facts["frames_across"] == facts["frames"], facts  # nor a module's frame
    assert facts["min_label_px"] >= 9.95, facts  # readable
    assert facts["chart_below"] and facts["pane_w"] >= 0.95 * facts["cell_w"], facts
    if size[1] >= 1000:  # the pane grows to 4/5 of the window: the whole graph
        assert facts["inside"] == facts["nodes"], facts
