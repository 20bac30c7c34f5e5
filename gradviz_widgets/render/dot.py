"""GradGraph (or a folded view of it) -> Graphviz DOT text, clustered by module, styled by health.

Pure: no I/O, deterministic output for a given graph (snapshot-tested). `svg_with_dot` is the
optional server-side layout for file export; the notebook lays DOT out in the browser (WASM).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import shutil
import subprocess
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .. import ids
from ..errors import GradExplorerError
from ..graph.grad_graph import GradGraph
from ..graph.nodes import UNDRAWN_KINDS, GradNode
from ..vocabulary import (
    GHOST_STYLE,
    LEGEND_ORDER,
    SELECTED_COLOR,
    STYLES,
    UNMEASURED_STYLE,
    alarm_rank,
    format_norm,
    norm_text,
    plain_text,
    style,
)
from .elide import elide_middle

#: status -> (fill, border, style, label), from vocabulary.STYLES (kept for older callers)
STATUS_STYLE: dict[str, tuple[str, str, str, str]] = {k: STYLES[k].as_tuple() for k in LEGEND_ORDER}

_SHAPES = {
    "op": "box",
    "accumulate": "box",
    "param": "box",
    "input": "invhouse",
    "tensor": "box",
    "output": "doubleoctagon",
    "module": "box3d",
    "ghost": "box",
}


@dataclasses.dataclass(frozen=True)
class DotGraph:
    """DOT text whose nodes and clusters are named by generated keys (n0, n1, c0, ...), and
    `keys`: key -> Python node id (nodes) or module path (clusters)."""

    dot: str
    keys: dict[str, str]

    @functools.cached_property
    def node_ids(self) -> set[str]:
        """Python ids of the drawn nodes (keys n0, n1, ...; clusters are c0, c1, ...); built
        once (callers test membership for each of thousands of nodes)."""
        return {v for k, v in self.keys.items() if k.startswith("n")}


def node_texts(n: GradNode) -> dict[str, str]:
    """What the page shows about a node's gradient, as text (the page formats no numbers):
    `norm_text` is the norm exactly as the node's label writes it, `status_text` the status
    in words.

    Example:
        >>> from gradviz_widgets.graph.grad_graph import GradNode
        >>> node_texts(GradNode("a#0", "A", "op", "", "A", grad_norm=1234.5, status="healthy"))
        {'norm_text': '1234', 'status_text': 'healthy'}
        >>> node_texts(GradNode("ghost:param:w", "Ghost", "ghost", "", "w\\n✂ frozen"))["status_text"]
        'no gradient (frozen)'
    """
    if not n.measured:
        return {"norm_text": "not measured", "status_text": UNMEASURED_TIP}
    words = style(n.status).words
    if n.kind == "ghost" and "✂ " in n.label:  # why no gradient reached it (frozen, unused)
        words = f"{words} ({n.label.rpartition('✂ ')[2]})"
    if n.grad_out is not None:
        words = f"{words} (what it passed to its inputs and parameters)"
    if n.forward_note:
        words = f"{words}; {n.forward_note}"
    return {"norm_text": _norm_of(n), "status_text": words}


def _norm_of(n: GradNode) -> str:
    """The node's norm as text. A folded module's status is what crosses its boundary, not its
    norm (what reached it from the loss side): "exactly 0.0" leaving it must not print a
    non-zero inflow as 0.0; where the two differ in status, both are printed.

    Example:
        >>> m = GradNode("m", "Seq", "module", "m", "m", grad_norm=3e5, status="healthy")
        >>> _norm_of(dataclasses.replace(m, grad_out=2.5))
        'in 3e+05 · out 2.5'
    """
    if n.kind != "module":
        return norm_text(n.grad_norm, n.status)
    if n.grad_out is None:
        return format_norm(n.grad_norm)
    return f"in {format_norm(n.grad_norm)} · out {format_norm(n.grad_out)}"


def to_dot(
    graph: GradGraph,
    *,
    hooked: Collection[str] = (),
    selected: str | None = None,
    merge_accumulate: bool = True,
    title: str | None = None,
) -> str:
    """DOT text for `graph`: one cluster per expanded module call, folded modules as 3-D boxes.

    Nodes are named n0, n1, ... and clusters cluster_c0, ... (see `render_dot` for the map back
    to node ids); `hooked` node ids get a double outline. With `merge_accumulate`,
    AccumulateGrad nodes are dropped and parameters connect to their consumers directly
    (torchviz draws both).

    Example:
        >>> from gradviz_widgets.graph.grad_graph import GradGraph, GradNode
        >>> g = GradGraph((GradNode("output", "Output", "output", "loss", "loss\\n()"),), (), {})
        >>> "doubleoctagon" in to_dot(g)
        True
    """
    return render_dot(
        graph, hooked=hooked, selected=selected, merge_accumulate=merge_accumulate, title=title
    ).dot


#: what an edge marked "≈" says: its norm is pieces of one gradient in quadrature
APPROX_TIP = "≈: the norm of pieces of one gradient taken in quadrature, not of their sum"
#: an edge or node whose run measured the flow of another view (`GradExplorer.run(view=)`)
UNMEASURED_TIP = "not measured: this run measured the flow another view draws; re-run to see it"
UNMEASURED_LOOK = {
    "fillcolor": UNMEASURED_STYLE.fill,
    "color": UNMEASURED_STYLE.line,
    "style": f"filled,{UNMEASURED_STYLE.dash}",
}


def render_dot(
    graph: GradGraph,
    *,
    hooked: Collection[str] = (),
    selected: str | None = None,
    merge_accumulate: bool = True,
    title: str | None = None,
    edge_colors: Mapping[tuple[str, str], str] | None = None,
) -> DotGraph:
    """`to_dot` plus the key map: every drawn node and cluster resolves to its Python id.

    `edge_colors` maps (src id, dst id) to a colour that replaces the edge's status colour
    (compare mode colours edges by the ratio of two runs' norms). User text never names a DOT
    element (names with quotes, backslashes, newlines, control
    characters or entities do not survive Graphviz's trip into SVG titles); it only appears,
    sanitised, in labels.

    Example:
        >>> from gradviz_widgets.graph.grad_graph import GradGraph, GradNode
        >>> g = GradGraph((GradNode("output", "Output", "output", "loss", "loss\\n()"),), (), {})
        >>> render_dot(g).keys, render_dot(g).node_ids
        ({'n0': 'output'}, {'output'})
    """
    nodes = [n for n in graph.nodes if not (merge_accumulate and n.kind in UNDRAWN_KINDS)]
    skip = {n.id for n in graph.nodes} - {n.id for n in nodes}
    into_acc = {e.dst: e.src for e in graph.edges if e.dst in skip}
    lines = [
        "digraph gradgraph {",
        '  graph [rankdir=TB, fontname="Helvetica", fontsize=11, nodesep=0.25, ranksep=0.28, '
        "newrank=true" + (f', label="{_dot_text([title])}", labelloc=t' if title else "") + "];",
        '  node [fontname="Helvetica", fontsize=10, height=0.3, margin="0.08,0.04"];',
        "  edge [arrowsize=0.6];",
    ]
    tree: dict[tuple[Any, ...], list[GradNode]] = {}
    for n in nodes:
        key = n.scope[:-1] if n.kind == "module" else n.scope
        tree.setdefault(key, []).append(n)
    emit = _Emitter(graph, tree, lines, set(hooked), selected)
    emit.cluster((), "  ")
    for e in graph.edges:
        src = into_acc.get(e.src, e.src) if e.src in skip else e.src
        if e.dst in skip or src in skip or src not in emit.key_of or e.dst not in emit.key_of:
            continue
        look = style(e.status)
        border, dash = look.line, look.dash
        if edge_colors and (e.src, e.dst) in edge_colors:
            border, dash = edge_colors[(e.src, e.dst)], "solid"
        width = _penwidth(e.grad_norm)
        approx = f', label="≈", fontsize=9, tooltip={_q(APPROX_TIP)}' if e.approx else ""
        if not e.measured:
            border, dash, width = UNMEASURED_STYLE.line, UNMEASURED_STYLE.dash, "1"
            approx = f', label="?", fontsize=9, tooltip={_q(UNMEASURED_TIP)}'
        lines.append(
            f"  {emit.key_of[src]} -> {emit.key_of[e.dst]} [color={_q(border)}, "
            f"style={_q(dash)}, penwidth={width}{approx}];"
        )
    lines.append("}")
    return DotGraph("\n".join(lines) + "\n", emit.keys)


class _Emitter:
    """Writes nodes and nested clusters, handing out the keys n0, n1, ... and c0, c1, ..."""

    def __init__(
        self,
        graph: GradGraph,
        tree: dict[tuple[Any, ...], list[GradNode]],
        lines: list[str],
        hooked: set[str],
        selected: str | None,
    ) -> None:
        self.graph, self.lines, self.hooked, self.selected = graph, lines, hooked, selected
        self.tree = tree  # scope -> the nodes drawn directly in it
        self.children = _children(tree)
        self.keys: dict[str, str] = {}
        self.key_of: dict[str, str] = {}
        self.clusters = 0

    def cluster(self, scope: tuple[Any, ...], pad: str) -> None:
        for n in self.tree.get(scope, ()):
            key = f"n{len(self.key_of)}"
            self.key_of[n.id] = key
            self.keys[key] = n.id
            self.lines.append(pad + _node_line(key, n, n.id in self.hooked, n.id == self.selected))
        for child in sorted(self.children.get(scope, ())):
            path, call = child[-1]
            info = self.graph.modules.get(path)
            calls = info.calls if info else 1
            kind = info.type if info else ""
            suffix = f" [call {call}]" if calls > 1 and call >= 0 else ""
            key = f"c{self.clusters}"
            self.clusters += 1
            self.keys[key] = path
            self.lines.append(f"{pad}subgraph cluster_{key} {{")
            self.lines.append(
                f'{pad}  id="{key}"; label="{_dot_text([f"{path}{suffix} · {kind}"], True)}"; '
                'labeljust=l; style="rounded,dashed"; color="#8a8a8a"; fontsize=10;'
            )
            self.cluster(child, pad + "  ")
            self.lines.append(f"{pad}}}")


def _children(
    tree: Mapping[tuple[Any, ...], object],
) -> dict[tuple[Any, ...], set[tuple[Any, ...]]]:
    """scope -> the scopes one level below it that hold nodes, directly or further down (one
    pass over the scopes, not one per cluster: a 1,000-module model has 1,000 clusters)."""
    out: dict[tuple[Any, ...], set[tuple[Any, ...]]] = {}
    for scope in tree:
        for i in range(len(scope)):
            out.setdefault(scope[:i], set()).add(scope[: i + 1])
    return out


#: inches (horizontal, vertical) around a folded module's label of three lines: Graphviz
#: centres it in the whole box3d, whose front face starts its 3D depth (4 pt) lower, so with
#: the default margin (0.08,0.04) the first line sat on the face's top edge (a ×600 group)
BOX3D_MARGIN = "0.08,0.1"


def _node_line(key: str, n: GradNode, hooked: bool, selected: bool) -> str:
    if n.kind == "ghost":
        attrs = {"shape": "box", **GHOST_STYLE, "penwidth": "2.5" if selected else "1"}
        if selected:
            attrs["color"] = SELECTED_COLOR
        body = ", ".join(f"{k}={_q(v)}" for k, v in attrs.items())
        return f'{key} [id="{key}", label="{_dot_text(label_lines(n), True)}", {body}];'
    look = style(n.status)
    styles = ["filled", "rounded" if n.kind in ("op", "accumulate") else "", look.dash]
    attrs = {
        "shape": _SHAPES.get(n.kind, "box"),
        "style": ",".join(s for s in styles if s),
        "fillcolor": look.fill,
        "color": look.line,
        "penwidth": "2.5" if n.status in ("exploding", "nonfinite") or selected else "1.2",
    }
    if not n.measured:
        attrs.update(UNMEASURED_LOOK, penwidth="1")
    if n.forward_note:  # where the forward made NaN/Inf: a solid, heavier outline than the
        # dashed one of every node whose gradient turned NaN/Inf after it
        solid = [x for x in attrs["style"].split(",") if x not in ("dashed", "dotted", "solid")]
        attrs.update(color=STYLES["nonfinite"].line, penwidth="3.5", style=",".join(solid))
    if hooked:
        attrs["peripheries"] = "2"
    if selected:
        attrs["color"] = SELECTED_COLOR
    lines = label_lines(n)
    if attrs["shape"] == "box3d" and len(lines) >= 3:
        attrs["margin"] = BOX3D_MARGIN
    body = ", ".join(f"{k}={_q(v)}" for k, v in attrs.items())
    return f'{key} [id="{key}", label="{_dot_text(lines, True)}", {body}];'


def label_lines(n: GradNode) -> list[str]:
    """The node label's lines, raw (sanitise before showing). Leaf, output and module labels are "name\\nsecond line": split at the
    LAST newline, so a newline inside a name stays part of the name (and is shown as ␊)."""
    if n.kind == "op" or "\n" not in n.label:
        lines = [n.label.strip("\n")]
    else:
        head, _, tail = n.label.rpartition("\n")
        lines = [head.lstrip("\n"), tail] if head.strip("\n") else [tail]
        if n.kind == "module" and len(lines) == 2:  # "name · type · N nodes": one row less
            lines = [f"{lines[0]} · {lines[1]}"]
    if not lines[0].strip():
        lines[0] = n.op or n.kind  # an empty first line would start the label with a newline
    if not n.measured:
        lines.append("‖g‖ not measured")
    elif n.grad_norm is not None and n.kind != "output":
        # a ×N group's label already gives its blocks' range: say which one this is
        into = "into group " if ids.is_group_id(n.id) else ""
        lines.append(f"‖g‖ {into}{_norm_of(n)}")
    elif n.kind in ("param", "input") and n.status == "none":
        lines.append("no grad")
    if n.param_text:  # a folded module's parameters, when not healthy
        lines.append(n.param_text)
    if n.forward_note:
        lines.append(f"⚠ {n.forward_note}")
    return lines


#: characters of a drawn label line: a longer one is elided in the middle (the tooltip, the
#: readout and the search keep it whole). A 190-character module name drew a node wider than
#: the pane, its unfolded children all showing the same middle stretch of it, and an
#: offline page opened on an empty stretch of a graph 4,000 px wide
LABEL_CHARS = 60


def _dot_text(lines: list[str], drawn: bool = False) -> str:
    """Lines of user text as the inside of a quoted DOT label: control characters shown as
    pictures, `\\` `"` escaped, `&` written as `&amp;` (Graphviz decodes entities in labels),
    lines joined with DOT's `\\n`; never starts with a line break (it crashes WASM Graphviz).
    `drawn`: a node's or frame's label, each line elided to LABEL_CHARS."""
    shown = [plain_text(line) for line in lines]
    if drawn:
        shown = [elide_middle(line, LABEL_CHARS) for line in shown]
    return "\\n".join(
        line.replace("\\", "\\\\").replace('"', '\\"').replace("&", "&amp;") for line in shown
    )


def _penwidth(norm: float | None) -> str:
    if norm is None or not math.isfinite(norm) or norm <= 0:
        return "1"
    return f"{min(3.5, max(0.6, 1.2 + 0.25 * math.log10(norm))):.2f}"


def _q(text: str) -> str:
    escaped = str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def svg_with_dot(dot: str, timeout: float = 60.0) -> str:
    """Lay `dot` out with the system Graphviz binary (optional; for file export only).

    Raises GradExplorerError when `dot` is missing, fails, or does not finish in `timeout` s.
    """
    exe = shutil.which("dot")
    if exe is None:
        raise GradExplorerError(
            "the Graphviz `dot` program is not installed; export the SVG from the widget "
            "(it lays the graph out in the browser) or install graphviz (apt/brew/conda)."
        )
    try:
        done = subprocess.run(
            [exe, "-Tsvg"],
            input=dot.encode("utf-8", "replace"),
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DotTimeout(
            f"Graphviz `dot` did not lay this graph out within {timeout:g} s: it is too large "
            "or too tangled (long-range edges, e.g. an unrolled RNN). Export a view that draws "
            "fewer nodes instead, ex.export_svg(path, depth=N), or fold modules in the widget "
            "and use its SVG button."
        ) from None
    if done.returncode != 0:
        raise GradExplorerError(f"dot failed: {done.stderr.decode(errors='replace')[:500]}")
    return done.stdout.decode("utf-8", "replace")


class DotTimeout(GradExplorerError):
    """`dot` did not lay the graph out in time (the caller may say which views are smaller)."""


def hook_fields(hooks: Sequence[str]) -> dict[str, Any]:
    """A node's hook marker for the page: whether it is drawn hooked, and the hooks it shows in
    words ("hooked: backward at layer2.0"; a folded node names those folded inside it).

    Example:
        >>> hook_fields(["backward at fc"]), hook_fields([])
        ({'hooked': True, 'hooked_text': 'hooked: backward at fc'}, {'hooked': False, 'hooked_text': ''})
    """
    return {"hooked": bool(hooks), "hooked_text": "hooked: " + ", ".join(hooks) if hooks else ""}


def node_info(n: GradNode, hooked: Sequence[str] = ()) -> dict[str, Any]:
    """What the page needs about one node (tooltip, search, hook marker, fold on double-click).
    `hooked`: the hooks it shows, in words (`hook_fields`). The page shows these strings as
    text only."""
    folded = n.kind == "module"
    return {
        "label": "\n".join(plain_text(line) for line in label_lines(n)),
        "op": plain_text(n.op),
        "module": plain_text(n.module or "(root)"),
        "kind": n.kind,
        "status": n.status,
        # JSON has no NaN/Inf: non-finite norms travel as their text
        "grad_norm": n.grad_norm
        if n.grad_norm is None or math.isfinite(n.grad_norm)
        else format_norm(n.grad_norm),
        "shape": list(n.shape) if n.shape is not None else None,
        **hook_fields(hooked),
        **node_texts(n),  # the norm as the label writes it, the status in words
        # module paths travel raw: they come back in toggle_scope messages
        "expandable": n.module if folded else "",
        "collapsible": n.module if (not folded and n.module not in ("", ids.LOSS_SCOPE)) else "",
        # a folded module's parameter health: the page draws a stripe in its colour
        "param_status": n.param_status,
        "param_text": plain_text(n.param_text),
        "param_color": style(n.param_status).line if n.param_text else "",
        # how alarming the node is, its own status or its parameters' (the first view opens on
        # the worst: the page compares numbers, it knows no status)
        "alarm": alarm_rank(
            n.status if n.measured else "", n.param_status, "nonfinite" if n.forward_note else ""
        ),
        # a parameter the gradient never reached, or a folded module of nothing but such (a
        # frozen stage at fold depth 1): no finding to open the view on (js/graph_view.js)
        "ghost": n.kind == "ghost" or (folded and all_ghosts(n.members)),
    }


def all_ghosts(members: Sequence[str]) -> bool:
    """Whether a folded module's members are all parameters the gradient never reached.

    Example:
        >>> all_ghosts(("ghost:param:stem.weight",)), all_ghosts(("ghost:param:w", "m/Addmm#0"))
        (True, False)
    """
    return bool(members) and all(map(ids.is_ghost, members))
