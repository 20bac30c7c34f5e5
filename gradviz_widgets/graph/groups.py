"""×N groups: runs of identical sibling module calls folded into one node (TensorBoard-style).

On a folded view, consecutive siblings whose structure signature (class, parameter shapes,
children's signatures) repeats with a period of 1-4 modules become one `kind="module"` node
`group:<first>-<last>` labelled "h.0–11 ×12 (Block)", with the worst crossing status, the
range of the blocks' norms ("‖g‖ per block") and, as its own norm, what reaches the run from
the loss side ("‖g‖ into group"), as a folded module's. A group id in `expand` keeps that run
unfolded.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from ..ids import (
    group_id,
    is_group_id,
    is_module_id,
    parse_group_id,
    parse_leaf_id,
    parse_module_id,
)
from ..vocabulary import UNMEASURED, format_norm, worst, worst_param
from .flows import Flows
from .grad_graph import GradGraph
from .nodes import GradEdge, GradNode, ModuleScope
from .view import forward_inside, inflow, merge_edges, outputs, param_health

MAX_PERIOD = 4


def signature(
    path: str, modules: Mapping[str, ModuleScope], shapes: Mapping[str, tuple[Any, ...] | None]
) -> tuple[Any, ...]:
    info = modules[path]
    return (
        info.type,
        tuple(shapes.get(p) for p in info.params),
        tuple(signature(c, modules, shapes) for c in info.children if c in modules),
    )


def group_runs(
    view: GradGraph,
    expand: Collection[str] = (),
    min_run: int = 3,
    shapes: Mapping[str, tuple[Any, ...] | None] | None = None,
    source: GradGraph | None = None,
) -> GradGraph:
    """`view` with runs of ≥ `min_run` repeats of identical sibling folded modules grouped.
    `shapes` (parameter name -> shape, from the unfolded graph) tells blocks apart whose
    parameters the fold hides (a view folded to the top draws no parameter); `source`, the
    graph `view` folds, holds the blocks' members: a group counts their parameters (without
    it, only parameters drawn in `view` are counted)."""
    by_module = {
        n.module: n
        for n in view.nodes
        if n.kind == "module" and is_module_id(n.id) and parse_module_id(n.id)[1] is None
    }
    if shapes is None:
        shapes = param_shapes(view)
    rep: dict[str, str] = {n.id: n.id for n in view.nodes}
    runs: list[tuple[int, list[GradNode]]] = []
    for info in view.modules.values():
        kids = [c for c in info.children if c in by_module]
        sigs = [signature(c, view.modules, shapes) for c in kids]
        i = 0
        while i < len(kids):
            period, reps = _run_at(sigs, i)
            end = i + period * reps
            if reps >= min_run and group_id(kids[i], kids[end - 1]) not in expand:
                members = [by_module[c] for c in kids[i:end]]
                runs.append((reps, members))
                for m in members:
                    rep[m.id] = group_id(kids[i], kids[end - 1])
            i = end if reps >= min_run else i + 1
    if not runs:
        return view
    base, rep = _unfolded(view, rep, source)
    flows = Flows(base.by_id, base.edges, base.partials)
    entering = {
        g: flows.sums(outputs(e, base.by_id)) for g, e in _entering(base.edges, rep).items()
    }
    new = tuple(_group_node(reps, members, entering, base.by_id) for reps, members in runs)
    nodes = tuple(n for n in view.nodes if rep[n.id] == n.id) + new
    edges = merge_edges(base.edges, rep, flows)
    return GradGraph(nodes, tuple(edges), view.modules, view.collapsed, view.partials)


def _unfolded(
    view: GradGraph, rep: dict[str, str], source: GradGraph | None
) -> tuple[GradGraph, dict[str, str]]:
    """The graph whose edges a grouping takes together, and each of its nodes' place in the
    grouped view: the unfolded `source` where given (its edges are the pieces the run's
    partial sums were measured for: a group's edge from a producer read outside it too is
    their sum, as a folded module call's is; the folded view's edges, already merged per
    module, could only be combined in quadrature), else `view` itself."""
    if source is None:
        return view, rep
    into = {m: n.id for n in view.nodes for m in n.members}
    placed = dict(rep)
    for node_id in source.by_id:
        if node_id not in placed:
            placed[node_id] = rep.get(into.get(node_id, node_id), node_id)
    return source, placed


def _entering(edges: Iterable[GradEdge], rep: Mapping[str, str]) -> dict[str, list[GradEdge]]:
    """Per group: the edges its blocks feed outside it (what reaches it from the loss side)."""
    out: dict[str, list[GradEdge]] = {}
    for e in edges:
        s, d = rep[e.src], rep[e.dst]
        if s != d and is_group_id(s):
            out.setdefault(s, []).append(e)
    return out


def param_shapes(graph: GradGraph) -> dict[str, tuple[Any, ...] | None]:
    """Parameter name -> shape for the parameters drawn in `graph` (a frozen one has none)."""
    return {parse_leaf_id(n.id)[1]: n.shape for n in graph.nodes if n.kind == "param"}


def _run_at(sigs: list[tuple[Any, ...]], i: int) -> tuple[int, int]:
    """(period, repeats) of the longest repeating run starting at `i`."""
    best = (1, 1)
    for p in range(1, MAX_PERIOD + 1):
        unit = sigs[i : i + p]
        if len(unit) < p:
            break
        reps = 1
        while sigs[i + reps * p : i + (reps + 1) * p] == unit:
            reps += 1
        if reps * p > best[0] * best[1] and reps > 1:
            best = (p, reps)
    return best


def _group_node(
    reps: int,
    members: list[GradNode],
    entering: Mapping[str, list[GradEdge]],
    lookup: Mapping[str, GradNode],
) -> GradNode:
    """The node of one run: its ‖g‖ is what reaches it from the loss side, as a folded
    module's is; the label adds the range of its blocks' own ‖g‖ (each block's inflow)."""
    first, last = members[0].module, members[-1].module
    gid = group_id(first, last)
    norms = [m.grad_norm for m in members if m.grad_norm is not None]
    span = f" · ‖g‖ per block {format_norm(min(norms))}–{format_norm(max(norms))}" if norms else ""
    period = max(len(members) // max(reps, 1), 1)  # a block of Linear then Tanh: both named
    kind = ", ".join(dict.fromkeys(m.op for m in members[:period]))
    norm, gmax = inflow(entering.get(gid, []), members)
    param_status, param_text = _group_params(reps, members, lookup)
    measured = all(m.measured for m in members) and all(e.measured for e in entering.get(gid, []))
    status = worst(m.status for m in members) if measured else UNMEASURED
    if not measured:
        norm, gmax, span = None, None, ""
    return GradNode(
        id=gid,
        op=kind,
        kind="module",
        module=gid,
        label=f"{first}–{last.rpartition('.')[2]} ×{reps}\n({kind}){span}",
        scope=members[0].scope,
        grad_norm=norm,
        grad_max=gmax,
        status=status,
        order=min((m.order for m in members if m.order is not None), default=None),
        members=tuple(x for m in members for x in m.members),
        param_status=param_status,
        param_text=param_text,
        measured=measured,
        forward_note=forward_inside(members),
    )


def _group_params(
    reps: int, members: list[GradNode], lookup: Mapping[str, GradNode]
) -> tuple[str, str]:
    """`param_health` of every parameter in the run ("2045 of 2400 params in 1023 of 1200
    blocks: exactly 0.0"): counted parameter by parameter, as the report counts them, since
    blocks whose worst parameter shares a status need not have all their parameters in it."""
    # the worst of the blocks' worst is the worst parameter: look parameters up only then
    statuses = [m.param_status for m in members if m.param_status]
    status = worst_param(statuses) if statuses else ""
    if status in ("", "healthy"):
        return status, ""
    inside = [lookup[x] for m in members for x in m.members if x in lookup]
    period = len(members) // reps
    hit = sum(
        any(m.param_status == status for m in members[b * period : (b + 1) * period])
        for b in range(reps)
    )
    where = "" if hit == reps else f" in {hit} of {reps} blocks"
    return param_health(inside, where)


def inside_group(path: str, gid: str, modules: Mapping[str, ModuleScope]) -> bool:
    """Whether module `path` is one of group `gid`'s blocks or inside one (not its parent).

    Example:
        >>> kids = ("h.0", "h.1", "h.2", "h.3", "ln")
        >>> mods = {"h": ModuleScope("h", "ModuleList", 1, "", kids, ())}
        >>> [inside_group(p, "group:h.0-3", mods) for p in ("h.2.attn", "h", "ln", "h.1")]
        [True, False, False, True]
    """
    parent = parse_group_id(gid)[0]
    parts = path.split(".")
    prefixes = (".".join(parts[:k]) for k in range(1, len(parts) + 1))
    return any(q != parent and unfolded_group_at(q, {gid}, modules) == gid for q in prefixes)


def unfolded_group_at(
    module: str, expand: Collection[str], modules: Mapping[str, ModuleScope]
) -> str | None:
    """The unfolded ×N group (a group id in `expand`) that a double-click on `module`'s frame
    folds back: a group of its children (the frame around the blocks) or the group `module`
    belongs to; None when there is none.

    Example:
        >>> unfolded_group_at("h", {"group:h.0-3"}, {})
        'group:h.0-3'
    """
    for gid in sorted(g for g in expand if is_group_id(g)):
        parent, first, last = parse_group_id(gid)
        if module == parent:
            return gid
        head, _, name = module.rpartition(".")
        kids = [c.rpartition(".")[2] for c in modules[parent].children] if parent in modules else []
        inside = head == parent and {first, last, name} <= set(kids)
        if inside and kids.index(first) <= kids.index(name) <= kids.index(last):
            return gid
    return None
