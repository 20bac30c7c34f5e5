"""GradGraph (or a folded view of it) -> Graphviz DOT text, clustered by module, styled by health.

Pure: no I/O, deterministic output for a given graph (snapshot-tested). `svg_with_dot` is the
optional server-side layout for file export; the notebook lays DOT out in the browser (WASM).
"""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Collection

from .errors import GradExplorerError
from .graph import GradGraph, GradNode

#: status -> (fill, border, style, label) — Okabe-Ito colours, and each status also differs
#: by line style, so the states stay distinct without colour vision.
STATUS_STYLE: dict[str, tuple[str, str, str, str]] = {
    "healthy": ("#d5f0e6", "#009e73", "solid", "healthy"),
    "vanishing": ("#d6e9f8", "#0072b2", "dashed", "vanishing"),
    "exploding": ("#fbe5c8", "#e69f00", "bold", "exploding"),
    "nonfinite": ("#f6cdb8", "#d55e00", "bold", "NaN / Inf"),
    "zero": ("#e6e6e6", "#000000", "dotted", "exactly 0.0"),
    "none": ("#ffffff", "#9a9a9a", "dashed", "no gradient (None)"),
}

_SHAPES = {"op": "box", "accumulate": "box", "param": "box", "input": "invhouse",
           "tensor": "box", "output": "doubleoctagon", "module": "box3d"}


def legend() -> list[dict]:
    """One entry per status for a legend: status, label, colour, dash.

    Example:
        >>> legend()[0]["status"]
        'healthy'
    """
    return [{"status": s, "label": lab, "color": border, "fill": fill, "dash": style}
            for s, (fill, border, style, lab) in STATUS_STYLE.items()]


def to_dot(
    graph: GradGraph,
    *,
    hooked: Collection[str] = (),
    selected: str | None = None,
    merge_accumulate: bool = True,
    title: str | None = None,
) -> str:
    """DOT text for `graph`: one cluster per expanded module call, folded modules as 3-D boxes.

    Node names are the stable node ids; `hooked` node ids get a double outline.
    With `merge_accumulate`, AccumulateGrad nodes are dropped and parameters connect to their
    consumers directly (torchviz draws both).

    Example:
        >>> from gradviz_widgets.graph import GradGraph, GradNode
        >>> g = GradGraph((GradNode("output", "Output", "output", "loss", "loss\\n()"),), (), {})
        >>> "doubleoctagon" in to_dot(g)
        True
    """
    nodes = [n for n in graph.nodes if not (merge_accumulate and n.kind == "accumulate")]
    skip = {n.id for n in graph.nodes} - {n.id for n in nodes}
    into_acc = {e.dst: e.src for e in graph.edges if e.dst in skip}
    lines = [
        "digraph gradgraph {",
        '  graph [rankdir=TB, fontname="Helvetica", fontsize=11, nodesep=0.25, ranksep=0.35, '
        'newrank=true' + (f', label={_q(title)}, labelloc=t' if title else "") + "];",
        '  node [fontname="Helvetica", fontsize=10, height=0.3, margin="0.08,0.04"];',
        '  edge [arrowsize=0.6];',
    ]
    tree: dict[tuple, list[GradNode]] = {}
    for n in nodes:
        key = n.scope[:-1] if n.kind == "module" else n.scope
        tree.setdefault(key, []).append(n)
    _emit_cluster((), tree, graph, lines, set(hooked), selected, "  ")
    for e in graph.edges:
        src = into_acc.get(e.src, e.src) if e.src in skip else e.src
        if e.dst in skip or src in skip:
            continue
        _, border, style, _ = STATUS_STYLE.get(e.status, STATUS_STYLE["none"])
        width = _penwidth(e.grad_norm)
        lines.append(f"  {_q(src)} -> {_q(e.dst)} [color={_q(border)}, style={style}, "
                     f"penwidth={width}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _emit_cluster(scope: tuple, tree: dict, graph: GradGraph, lines: list[str],
                  hooked: set[str], selected: str | None, pad: str) -> None:
    for n in tree.get(scope, ()):
        lines.append(pad + _node_line(n, n.id in hooked, n.id == selected))
    children = sorted({k[: len(scope) + 1] for k in tree if len(k) > len(scope) and k[: len(scope)] == scope})
    for child in children:
        path, call = child[-1]
        info = graph.modules.get(path)
        calls = info.calls if info else 1
        name = f"cluster_{path}" + (f"@{call}" if calls > 1 and call >= 0 else "")
        kind = info.type if info else ""
        suffix = f" [call {call}]" if calls > 1 and call >= 0 else ""
        lines.append(f"{pad}subgraph {_q(name)} {{")
        lines.append(f'{pad}  label={_q(f"{path}{suffix} · {kind}")}; labeljust=l; '
                     f'style="rounded,dashed"; color="#8a8a8a"; fontsize=10;')
        _emit_cluster(child, tree, graph, lines, hooked, selected, pad + "  ")
        lines.append(f"{pad}}}")


def _node_line(n: GradNode, hooked: bool, selected: bool) -> str:
    fill, border, style, _ = STATUS_STYLE.get(n.status, STATUS_STYLE["none"])
    styles = ["filled", "rounded" if n.kind in ("op", "accumulate") else "", style]
    attrs = {
        "label": _label(n),
        "shape": _SHAPES.get(n.kind, "box"),
        "style": ",".join(s for s in styles if s),
        "fillcolor": fill,
        "color": border,
        "penwidth": "2.5" if n.status in ("exploding", "nonfinite") or selected else "1.2",
    }
    if hooked:
        attrs["peripheries"] = "2"
    if selected:
        attrs["color"] = "#cc79a7"
    body = ", ".join(f"{k}={_q(v)}" for k, v in attrs.items())
    return f"{_q(n.id)} [{body}];"


def _label(n: GradNode) -> str:
    text = n.label.lstrip("\n") or n.op  # a leading newline breaks WASM Graphviz (env notes)
    if n.grad_norm is not None and n.kind != "output":
        text += f"\n‖g‖ {format_norm(n.grad_norm)}" if n.status != "zero" else "\n‖g‖ 0.0"
    elif n.kind in ("param", "input") and n.status == "none":
        text += "\nno grad"
    return text


def format_norm(x: float | None) -> str:
    """Compact text for a norm: 0.0, 1.2e-23, 0.279, NaN, Inf, None.

    Example:
        >>> format_norm(1.234e-23), format_norm(0.27901), format_norm(None)
        ('1.23e-23', '0.279', 'None')
    """
    if x is None:
        return "None"
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Inf"
    if x == 0:
        return "0.0"
    if 1e-3 <= abs(x) < 1e4:
        return f"{x:.4g}"
    return f"{x:.3g}"


def _penwidth(norm: float | None) -> str:
    if norm is None or not math.isfinite(norm) or norm <= 0:
        return "1"
    return f"{min(3.5, max(0.6, 1.2 + 0.25 * math.log10(norm))):.2f}"


def _q(text: str) -> str:
    escaped = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def svg_with_dot(dot: str, timeout: float = 60.0) -> str:
    """Lay `dot` out with the system Graphviz binary (optional; for file export only)."""
    exe = shutil.which("dot")
    if exe is None:
        raise GradExplorerError(
            "the Graphviz `dot` program is not installed; export the SVG from the widget "
            "(it lays the graph out in the browser) or install graphviz (apt/brew/conda).")
    done = subprocess.run([exe, "-Tsvg"], input=dot.encode(), capture_output=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        raise GradExplorerError(f"dot failed: {done.stderr.decode(errors='replace')[:500]}")
    return done.stdout.decode()
