"""`GradWatch.show()` in marimo (``marimo run``, headless Chromium): marimo draws no
ipywidgets, so the cell printed `<WatchWidget object at 0x...>`; it shows a line saying so
and the record as it stands, the offline page in an iframe (heat map, lines, table)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import test_marimo_ui as marimo_ui
from harness import ARTIFACTS

APP = """import marimo
app = marimo.App(width="full")

@app.cell
def _():
    import torch
    from torch import nn
    from gradviz_widgets import GradWatch
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    watch = GradWatch(model, optimizer=opt)
    for _ in range(30):
        opt.zero_grad(); model(torch.randn(8, 4)).pow(2).mean().backward(); opt.step()
    watch.show()
    return

if __name__ == "__main__":
    app.run()
"""


@pytest.mark.ui
def test_a_watch_in_marimo_shows_its_record(
    tmp_path: Path, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = tmp_path / "watch_app.py"
    app.write_text(APP)
    monkeypatch.setattr(marimo_ui, "APP", app)  # the server copies this app
    server = marimo_ui.MarimoServer(tmp_path / "srv")
    server.start()
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{server.url}/", wait_until="domcontentloaded", timeout=60_000)
        page.get_by_text("GradWatch in marimo").first.wait_for(timeout=120_000)
        frame = page.frame_locator("iframe").first
        frame.get_by_text("Gradient norm per parameter and step").wait_for(timeout=60_000)
        body = frame.locator("body").inner_text()
        assert "4 parameters" in body and "30 columns" in body, body[:300]
        assert "WatchWidget object" not in page.locator("body").inner_text()
        page.screenshot(path=str(ARTIFACTS / "marimo_watch.png"))
    finally:
        page.close()
        server.stop()
