"""Open a standalone page (the explorer's or GradWatch's export) the way its browser tests do."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def open_offline_page(
    browser: Any, path: Path, ready: str, size: tuple[int, int] = (1280, 800)
) -> tuple[Any, list[str]]:
    """A standalone page over file:// at `size` (1280x800), every other request aborted;
    returns the page (once `ready` matches) and the list every problem lands in: page errors,
    console errors, dialogs and requests that tried to leave."""
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
    page.on("dialog", lambda d: (problems.append(f"dialog: {d.message}"), d.dismiss()))

    def route(r: Any) -> None:
        if r.request.url.startswith(("file:", "data:", "blob:")):
            r.continue_()
        else:
            problems.append(f"request: {r.request.url}")
            r.abort()

    page.route("**/*", route)
    page.goto(path.as_uri())
    page.wait_for_selector(ready, timeout=60_000)
    return page, problems
