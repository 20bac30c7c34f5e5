"""One self-contained, interactive HTML page of a run: works offline over file://.

The page runs the widget's own front end (the bundled GraphPane ES module, WASM Graphviz
inside) against a small in-page model instead of a kernel: pan/zoom, tooltips, search and
selection work as in the notebook; fold/unfold switches between module depths laid out in
advance (there is no Python behind the page). The chart is an SVG drawn here: log-scale bars
per parameter where None, exactly 0.0 and NaN/Inf are pinned and labelled; clicking a bar
selects the parameter's node. No request leaves the page: no CDN, no plotly.js (which alone
would be over 3 MB).

Example:
    >>> from gradviz_widgets.examples import dead_branch_example
    >>> net, x, y = dead_branch_example()
    >>> ex = GradExplorer(net, x, loss_fn=nn.CrossEntropyLoss(), target=y)  # doctest: +SKIP
    >>> text = page_html(ex.graph, ex.report)                                # doctest: +SKIP
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..frontend import script_json, script_text, static_text
from ..graph.ghosts import add_ghosts
from ..graph.grad_graph import GradGraph
from ..ids import ghost_id, param_id
from ..report.grad_report import GradReport
from ..vocabulary import legend, plain_text
from .chart import bar_rows
from .dot import node_info, node_texts, render_dot
from .hook_marks import hooked_at, hooked_clusters, plan_text
from .page_chart import chart_svg

#: the hooks in force ((module or node, kind) pairs) and the modifiers (module -> words)
Hooks = tuple[Sequence[tuple[str, str]], Mapping[str, str]]
_PACKAGE = Path(__file__).resolve().parents[1]
BUNDLE = _PACKAGE / "static" / "graph_pane.js"


def views(graph: GradGraph, hooks: Hooks = ((), {})) -> list[dict[str, Any]]:
    """The page's views, shallow to deep ("full" last; the one the page opens on, the auto
    fold depth, marked `default`): label, depth, DOT, key map and node info for each distinct
    drawing; `hooks` (the hooks and modifiers in force, as `GradExplorer.hooks` /
    `.modifiers`) marked on the nodes that show them, as in the widget."""
    depths: list[int | None] = list(range(0, max(graph.max_depth, 1)))
    auto = graph.auto_depth()
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for depth in [auto, *depths, None]:
        view = graph if depth is None else graph.view(depth)
        marks = hooked_at(view, list(hooks[0]), dict(hooks[1]))
        drawn = render_dot(view, hooked=marks)
        if drawn.dot in seen:
            continue
        seen.add(drawn.dot)
        out.append(
            {
                "label": "full" if depth is None else f"depth {depth}",
                "depth": depth,
                "dot": drawn.dot,
                "key_map": drawn.keys,
                "drawn": len(drawn.node_ids),  # `nodes` also holds what the DOT leaves out
                "nodes": {
                    n.id: {**node_info(n, marks.get(n.id, ())), **node_texts(n)} for n in view.nodes
                },
                "clusters": hooked_clusters(view, list(hooks[0]), dict(hooks[1])),
                "default": not out,  # the auto depth's: built first
            }
        )
    # the fold menu in depth order (it read "depth 2, depth 0, depth 1, ..."), full last
    return sorted(out, key=lambda v: math.inf if v["depth"] is None else v["depth"])


def bar_target(drawn: GradGraph, name: str) -> str:
    """The node a chart bar selects: the parameter's node, or the ghost drawn for a parameter
    the gradient never reached (frozen, unused), so its bar shows why.

    Example:
        >>> from gradviz_widgets.graph.grad_graph import GradNode
        >>> g = GradGraph((GradNode("ghost:param:w", "Ghost", "ghost", "", "w\\n✂ frozen"),), (), {})
        >>> bar_target(g, "w"), bar_target(g, "b")
        ('ghost:param:w', 'param:b')
    """
    pid = param_id(name)
    return ghost_id(pid) if pid not in drawn and ghost_id(pid) in drawn else pid


def page_html(
    graph: GradGraph, report: GradReport, title: str = "Gradient flow", hooks: Hooks = ((), {})
) -> str:
    """The whole page as text (see the module docstring); `hooks`: (hooks, modifiers) in force,
    marked on the graph as the widget marks them (the legend's "hooked")."""
    if not BUNDLE.is_file():
        from ..errors import GradExplorerError

        raise GradExplorerError(
            f"the front-end bundle {BUNDLE} is missing: run pip install -e . "
            "(needs Node.js) or install the wheel, which ships it"
        )
    drawn = add_ghosts(graph, report.none_reasons)
    state = {
        "views": views(drawn, hooks),
        "legend": legend(),
        "params": [bar_target(drawn, p.name) for p in report.params],
    }
    findings = "".join(f"<li>{html.escape(plain_text(f))}</li>" for f in report.findings)
    said = [plan_text(*hooks)] if hooks[0] or hooks[1] else []
    said += report.notes
    notes = "".join(f"<li>{html.escape(plain_text(n))}</li>" for n in said)
    return _TEMPLATE.format(
        title=html.escape(plain_text(title)),
        summary=html.escape(plain_text(report.summary())),
        findings=findings or "<li>all gradients healthy</li>",
        notes=notes or "<li>none</li>",
        chart=chart_svg(bar_rows(report), report.thresholds),
        state=script_json(state),
        bundle=script_text(BUNDLE.read_text(encoding="utf-8")),
        # the host script (js/page_host.js) and the stylesheet, copied next to the bundle
        script=script_text(static_text("page_host.js")),
        style=static_text("explorer_page.css"),
    )


_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{style}</style></head>
<body>
<header><h1>{title}</h1><div id="summary">{summary}</div>
<label for="depth">Fold</label><select id="depth"></select>
<span id="hint">double-click a module to fold or unfold its depth (this page keeps one view per depth); click a bar to find its parameter</span>
</header>
<main>
<section id="graph" aria-label="backward graph"></section>
<section id="side">
<h2 style="font-size:15px">Gradient norm per parameter</h2>
<div id="chart">{chart}</div>
<h2 style="font-size:15px">Selected</h2><div id="detail" aria-live="polite"></div>
<h2 style="font-size:15px">Findings</h2><ul id="findings">{findings}</ul>
<h2 style="font-size:15px">Notes</h2><ul id="notes">{notes}</ul>
</section>
</main>
<script type="application/json" id="gvw-state">{state}</script>
<script type="text/plain" id="gvw-bundle">{bundle}</script>
<script type="module">
{script}
</script>
</body></html>
"""

__all__ = ["page_html", "views"]
