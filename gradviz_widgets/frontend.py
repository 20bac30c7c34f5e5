"""The built front-end files (static/, made from js/ by js/build.mjs), read as text.

Every line of JS and CSS lives in js/; the Python side inlines these files into the offline
pages and the marimo mirror. The wheel and the sdist ship static/ (pyproject's artifacts); a
source checkout builds it with `pip install -e .` (needs Node.js). A stylesheet or script that
the build copies unchanged is also found in js/ of a checkout that has not been built.

Example:
    >>> "#heat" in static_text("watch_page.css")
    True
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import GradExplorerError

PACKAGE = Path(__file__).resolve().parent
STATIC = PACKAGE / "static"
#: js/ of a source checkout (absent in an installed wheel)
SOURCES = PACKAGE.parent / "js"
#: the files js/build.mjs copies unchanged (the rest are bundles)
COPIED = (
    "page_host.js",
    "graph_pane.css",
    "watch_page.css",
    "marimo_mirror.css",
    "explorer_page.css",
)


def static_path(name: str) -> Path | None:
    """Where the built file `name` is (static/, or js/ for a copied file), None if nowhere."""
    places = [STATIC / name, *([SOURCES / name] if name in COPIED else [])]
    return next((p for p in places if p.is_file()), None)


def static_text(name: str) -> str:
    """The text of the built file `name`; a GradExplorerError saying how to build it if missing."""
    path = static_path(name)
    if path is None:
        raise GradExplorerError(
            f"the front-end file {STATIC / name} is missing: run pip install -e . in the "
            "repository (needs Node.js and npm; or `npm ci && node build.mjs` in js/), "
            "or install the wheel, which ships it"
        )
    return path.read_text(encoding="utf-8")


def script_json(value: Any) -> str:
    """JSON that cannot end or confuse a <script> element: `<`, `>`, `&` and U+2028/2029
    escaped (a `<!--` followed by `<script` would otherwise keep the element open past its
    `</script>`, swallowing the rest of the page).

    Example:
        >>> script_json({"n": "<!--<script></script><b>&\\u2028"})
        '{"n": "\\\\u003c!--\\\\u003cscript\\\\u003e\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e\\\\u0026\\\\u2028"}'
    """
    text = json.dumps(value, ensure_ascii=True, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def script_text(js: str) -> str:
    """`js` safe inside a <script> element: no `</script` can end it early.

    Example:
        >>> script_text('x = "</script>"')
        'x = "<\\\\/script>"'
    """
    return js.replace("</script", "<\\/script").replace("</SCRIPT", "<\\/SCRIPT")
