"""The front end of the marimo mirror (marimo_mirror.Mirror): js/marimo_mirror.js and
js/marimo_mirror.css, built into static/ (see gradviz_widgets.frontend).

The module draws ipywidgets controls from a plain description and sends each user change back;
labels, options and tooltips are set as text, only ``html`` items as HTML (see the JS file).
Without a build the mirror shows what to do instead of its controls.
"""

from __future__ import annotations

from ..errors import GradExplorerError
from ..frontend import static_text


def _read(name: str, missing: str) -> str:
    try:
        return static_text(name)
    except GradExplorerError as e:
        return missing.replace("MESSAGE", repr(str(e)).replace("'", '"'))


ESM = _read("marimo_mirror.js", "export default { render({ el }) { el.textContent = MESSAGE; } };")
CSS = _read("marimo_mirror.css", "")
