"""The explorer in marimo (``marimo run`` on tests/ui/marimo_app.py) in headless Chromium.

The app shows plain ``ex.show()``: inside marimo that is the same ExplorerWidget, drawn whole
(gradviz_widgets/widget_marimo.py). Checked at 1280x800: no "not supported" banner; toolbar,
graph and chart (under the graph: the row is narrower than 1,100 px) and readout drawn; a click on the gate's node hooks ``gate``
in the kernel (a run button re-runs a cell that prints ``ex.hooks``), re-runs, outlines the
gate's bars in the chart and fills the readout with the hook's firing; the chart-mode toggle,
Run and a rejected threshold (shown in the status line, the field back to the value in force)
act on the widget in the kernel, and the CSV button downloads the norms. At 1920x1080 the
chart beside the graph takes its 40 % of the row. See docs/frontends.md.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import ARTIFACTS, CHROMIUM, REPO, free_port, is_allowed, wait_until

from gradviz_widgets.widget.first_view import arrange

APP = Path(__file__).with_name("marimo_app.py")
GATE_SELECTOR = '.gvw-pane g.node[aria-label^="AddmmBackward0"][aria-label*="module gate"]'
NOT_SUPPORTED = "Jupyter widgets are not supported in marimo"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class MarimoServer:
    """``marimo run`` on a copy of the test app, all state (HOME, caches) in ``base``."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = base / "marimo.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> None:
        home = self.base / "home"
        home.mkdir(parents=True, exist_ok=True)
        app = shutil.copyfile(APP, self.base / "app.py")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "MARIMO"))}
        env.update(
            HOME=str(home),
            XDG_CONFIG_HOME=str(home / ".config"),
            XDG_CACHE_HOME=str(home / ".cache"),
            XDG_STATE_HOME=str(home / ".state"),
            MARIMO_SKIP_UPDATE_CHECK="1",
            PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
            NO_PROXY="127.0.0.1,localhost",
            no_proxy="127.0.0.1,localhost",
        )
        cmd = [
            sys.executable, "-m", "marimo", "run", "--headless", "--no-token", "--no-sandbox",
            "--host", "127.0.0.1", "--port", str(self.port), str(app),
        ]  # fmt: skip
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                cmd,
                env=env,
                cwd=self.base,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until(self._answers, timeout, f"marimo on port {self.port}", interval=0.3)

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"marimo exited ({self.proc.returncode}):\n{self.log_tail()}")
        try:
            with _NO_PROXY.open(f"{self.url}/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None


@pytest.fixture(scope="module")
def marimo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MarimoServer]:
    pytest.importorskip("marimo", reason="marimo is not installed (pip install marimo)")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (set GRADVIZ_CHROMIUM)")
    server = MarimoServer(tmp_path_factory.mktemp("marimo"))
    try:
        server.start()
        yield server
    finally:
        server.stop()
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "marimo-server.log").write_text(server.log_tail(20000), encoding="utf-8")


class Page:
    """A browser page with every non-loopback request aborted and dialogs/errors recorded."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.blocked: list[str] = []
        self.console: list[str] = []
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        page.on("pageerror", lambda e: self.errors.append(f"{e}\n{e.stack}"))
        page.on("dialog", self._dialog)
        page.context.route("**/*", self._route)

    def _route(self, route: Any) -> None:
        if is_allowed(route.request.url):
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort()

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def save(self, name: str) -> None:
        ARTIFACTS.mkdir(exist_ok=True)
        try:
            self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"))
        except Exception as e:  # noqa: BLE001 - a screenshot is a diagnostic only
            print("no screenshot:", e)
        text = "## console\n" + "\n".join(self.console)
        text += "\n\n## page errors\n" + "\n".join(self.errors)
        text += "\n\n## dialogs\n" + "\n".join(self.dialogs)
        text += "\n\n## blocked requests\n" + "\n".join(self.blocked)
        (ARTIFACTS / f"{name}.log").write_text(text, encoding="utf-8")


@pytest.fixture
def mpage(browser: Any, request: pytest.FixtureRequest) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(30_000)
    page = Page(context.new_page())
    try:
        yield page
    finally:
        page.save(request.node.name)
        context.close()


def gate_node(page: Any) -> Any:
    """The gate's op node: by accessible name; else any node whose visible text says gate."""
    by_name = page.locator(GATE_SELECTOR)
    if by_name.count():
        return by_name.first
    return page.locator(".gvw-pane g.node").filter(has_text="gate").first


def outlined_bars(page: Any) -> int:
    """How many bars of the chart have the thick outline of the selected module."""
    return page.locator(".js-plotly-plot .bars .point path").evaluate_all(
        "ps => ps.filter(p => parseFloat(getComputedStyle(p).strokeWidth) >= 2.5).length"
    )


def status(page: Any) -> str:
    return page.locator(".gvw-status").first.inner_text()


def arranged_chart(page: Any, window: int) -> dict[str, Any]:
    """The chart once it has the width the explorer's row arranges for it (`first_view.arrange`),
    beside the graph or under it as arranged, inside the window; its facts."""

    def facts() -> dict[str, Any]:
        graph = page.locator(".gvw-pane").first.bounding_box()
        chart = page.locator(".js-plotly-plot").first.bounding_box()
        row = page.locator(".gv-explorer").first.bounding_box()
        plot = page.locator(".js-plotly-plot svg.main-svg").first.get_attribute("width")
        shape = arrange(round(row["width"]))
        return {"graph": graph, "chart": chart, "row": row, "svg_width": plot,
                "stacked": shape.stacked, "want": shape.chart_width}  # fmt: skip

    try:
        wait_until(lambda: abs(facts()["chart"]["width"] - facts()["want"]) <= 2, 60, "the width")
    except TimeoutError as e:
        raise AssertionError(f"{e}: {facts()}") from None
    f = facts()
    graph, chart = f["graph"], f["chart"]
    assert f["svg_width"] == str(f["want"]), f  # plotly drew it at that width, not scaled
    if f["stacked"]:
        assert chart["y"] >= graph["y"] + graph["height"] - 1, f  # under the graph
    else:
        assert chart["x"] >= graph["x"] + graph["width"] - 1, f  # side by side
        assert chart["y"] < graph["y"] + graph["height"], f
    assert chart["x"] + chart["width"] <= window, f
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(".js-plotly-plot").first.screenshot(
        path=str(ARTIFACTS / f"marimo_chart_{window}.png")
    )
    return f


@pytest.mark.ui
def test_marimo_chart_takes_its_share_of_a_wide_row(
    marimo_server: MarimoServer, browser: Any, request: pytest.FixtureRequest
) -> None:
    """At 1920x1080 the explorer's row is ~1,696 px: the chart beside the graph takes 40 % of
    it. The kernel got the row's width and re-arranged, but the chart stayed 440 px: plotly's
    front end was still loading when the new width came, and marimo drew it from the state of
    its display. It is drawn at the arranged width."""
    context = browser.new_context(viewport={"width": 1920, "height": 1080})
    context.set_default_timeout(30_000)
    mpage = Page(context.new_page())
    try:
        page = mpage.page
        page.goto(f"{marimo_server.url}/", wait_until="domcontentloaded", timeout=60_000)
        page.locator(".gvw-pane svg g.node").first.wait_for(state="attached", timeout=180_000)
        page.locator(".js-plotly-plot .bars .point").first.wait_for(
            state="attached", timeout=90_000
        )
        facts = arranged_chart(page, 1920)
        assert not facts["stacked"] and facts["want"] > 600, facts
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "marimo_1920.png"))
        assert not mpage.errors, mpage.errors
    finally:
        mpage.save(request.node.name)
        context.close()


@pytest.mark.ui
def test_marimo_whole_explorer(marimo_server: MarimoServer, mpage: Page) -> None:
    page = mpage.page
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(f"{marimo_server.url}/", wait_until="domcontentloaded", timeout=60_000)

    # Playwright's CSS locators pierce the open shadow roots marimo renders anywidgets into
    page.locator(".gvw-pane svg g.node").first.wait_for(state="attached", timeout=180_000)
    page.locator(".js-plotly-plot .bars .point").first.wait_for(state="attached", timeout=90_000)
    run = page.get_by_role("button", name="Run", exact=True)
    run.wait_for(timeout=60_000)
    assert page.locator(".gvw-pane svg g.node").count() > 5
    assert page.get_by_text(NOT_SUPPORTED).count() == 0
    assert "CrossEntropyLoss" in page.locator(".gvm-html").first.inner_text()  # loss line
    assert "Click a node" in page.locator(".gvm-html").last.inner_text()  # readout
    for name in ("device", "click hooks", "fold at"):
        assert page.get_by_role("combobox", name=name).count() == 1
    # the row is the explorer's cell (1,078 px here): the chart takes the width arranged for
    # it, as in Jupyter: under the graph, the row's width
    assert arranged_chart(page, 1280)["stacked"]
    page.screenshot(path=str(ARTIFACTS / "marimo_initial.png"))
    assert outlined_bars(page) == 0

    # a click on the gate's node reaches ExplorerWidget.click_node in the kernel: the module
    # gets a hook, the model re-runs, the pane marks the hooked nodes, the chart outlines the
    # gate's bars and the readout shows what the hook saw
    gate_node(page).click()
    page.locator(".gvw-pane g.node.hooked").first.wait_for(state="attached", timeout=90_000)
    wait_until(
        lambda: "grad_output[0]" in page.locator(".gvm-html").last.inner_text(), 90, "the readout"
    )
    assert page.locator(".gvm-html").last.inner_text().startswith("gate")
    wait_until(lambda: outlined_bars(page) == 2, 90, "the gate's two bars outlined")
    assert "backward hook on at gate" in status(page)
    # the kernel's own view: the run button re-runs the cell that prints ex.hooks
    page.get_by_role("button", name="show hooks").click()
    hooks = page.locator(".gvt-hooks").first
    hooks.wait_for(timeout=60_000)
    assert "('gate', 'backward')" in hooks.inner_text()
    page.screenshot(path=str(ARTIFACTS / "marimo_after_click.png"))

    # toolbar: chart mode (one bar per module), Run (the status line says the run's summary)
    page.get_by_role("button", name="per module").click()
    wait_until(lambda: page.locator(".js-plotly-plot .bars .point").count() == 4, 90, "4 bars")
    assert "per-module" in (page.locator(".js-plotly-plot .gtitle").first.text_content() or "")
    run.click()
    wait_until(lambda: "hook on at gate" not in status(page), 90, "Run's new status line")
    # a rejected threshold: the error in the status line, the field back to the value in force
    field = page.get_by_role("spinbutton", name="vanishing <")
    field.fill("1e9")
    field.press("Enter")
    wait_until(lambda: "vanishing < exploding" in status(page), 90, "the rejected threshold")
    wait_until(lambda: float(field.input_value()) == 1e-7, 90, "the field reverted")
    assert field.evaluate("e => e.getRootNode().activeElement === e")  # focus kept on redraw
    page.screenshot(path=str(ARTIFACTS / "marimo_toolbar.png"))
    # a download button: the file comes from the kernel through the graph pane
    with page.expect_download(timeout=60_000) as download:
        page.get_by_role("button", name="CSV", exact=True).click()
    assert download.value.suggested_filename == "grad_norms.csv"

    # compare mode: A and B bars for every parameter, names apart (in marimo they lay flat on
    # top of each other in a 440 px chart: the front end kept the axes and width of an older
    # figure; the chart now takes the whole width under the graph, as arranged)
    page.get_by_role("button", name="per parameter").click()
    wait_until(lambda: page.locator(".js-plotly-plot .bars .point").count() == 8, 90, "8 bars")
    page.get_by_role("button", name="Compare").click()
    run.click()
    wait_until(
        lambda: page.locator(".js-plotly-plot .bars .point").count() == 16, 90, "A and B bars"
    )
    page.wait_for_timeout(1500)
    ticks = page.locator(".js-plotly-plot .xtick text").evaluate_all(
        "ts => ts.map(t => { const b = t.getBoundingClientRect(); return [b.left, b.right]; })"
    )
    page.screenshot(path=str(ARTIFACTS / "marimo_compare.png"))
    assert len(ticks) == 8, ticks
    ticks.sort()
    assert all(a[1] <= b[0] + 1 for a, b in zip(ticks, ticks[1:])), ticks

    if mpage.blocked:
        print("aborted non-loopback requests:", *mpage.blocked, sep="\n  ")
    assert not mpage.errors, mpage.errors
    assert not mpage.dialogs, mpage.dialogs
