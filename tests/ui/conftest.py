"""Fixtures for end-to-end tests in real JupyterLab + headless Chromium (marker: ui)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from harness import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, JupyterLabServer, LabPage, sized_page


@pytest.fixture(scope="session")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLabServer]:
    """One JupyterLab server for the session, in a temporary environment."""
    server = JupyterLabServer(tmp_path_factory.mktemp("jupyterlab"))
    try:
        server.start()
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "jupyterlab-start.log").write_text(server.log_tail(20000), encoding="utf-8")
        server.stop()
        raise
    yield server
    server.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """Headless system Chromium driven by Playwright."""
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (set GRADVIZ_CHROMIUM)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def lab(
    lab_server: JupyterLabServer, browser: object, request: pytest.FixtureRequest
) -> Iterator[LabPage]:
    """A fresh page on the lab; console, blocked requests and server log go to test-artifacts/."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})  # type: ignore[attr-defined]
    context.set_default_timeout(30_000)
    page = context.new_page()
    lab_page = LabPage(lab_server, page)
    try:
        yield lab_page
    finally:
        lab_page.save_logs(request.node.name)
        if lab_page.blocked:
            print("blocked non-loopback requests:", *lab_page.blocked, sep="\n  ")
        context.close()


@pytest.fixture
def small_lab(
    lab_server: JupyterLabServer, browser: object, request: pytest.FixtureRequest
) -> Iterator[LabPage]:
    """A 1280x800 page on the lab."""
    with sized_page(lab_server, browser, (1280, 800), request.node.name) as lab:
        yield lab
