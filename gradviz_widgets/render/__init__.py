"""Plain data -> what a person sees, without torch: DOT text (`dot`), chart figures (`chart`,
`chart_compare`, `compare_view`), the offline page (`page`, `page_chart`), the hook readout
(`readout`).

`gradviz_widgets.render.to_dot` / `render_dot` / `svg_with_dot` (the documented path) and the
vocabulary names older callers took from the old `render` module stay importable from here;
code inside the package imports each name from the module that defines it.
"""

from ..vocabulary import (
    GHOST_STYLE,
    LEGEND_ORDER,
    SELECTED_COLOR,
    STYLES,
    format_norm,
    html_text,
    legend,
    norm_text,
    plain_text,
    style,
)
from .dot import STATUS_STYLE, DotGraph, label_lines, node_texts, render_dot, svg_with_dot, to_dot

__all__ = [
    "GHOST_STYLE",
    "LEGEND_ORDER",
    "SELECTED_COLOR",
    "STATUS_STYLE",
    "STYLES",
    "DotGraph",
    "format_norm",
    "html_text",
    "label_lines",
    "legend",
    "node_texts",
    "norm_text",
    "plain_text",
    "render_dot",
    "style",
    "svg_with_dot",
    "to_dot",
]
