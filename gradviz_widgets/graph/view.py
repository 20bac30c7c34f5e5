"""Folding a GradGraph by module: the body of `GradGraph.view` and its helpers."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from ..ids import LEAF_KINDS, PARAMS_CALL, Scope, module_id
from ..vocabulary import UNMEASURED, strongest_flow, style, worst_param
from ..vocabulary import worst as _worst
from .flows import Flows, combine_flow, in_quadrature
from .grad_graph import GradGraph
from .nodes import FORWARD_INSIDE, FORWARD_ORIGIN, GradEdge, GradNode, ModuleScope, drawn_count


def fold(
    self: GradGraph, depth: int | None, expand: Iterable[str], collapse: Iterable[str]
) -> GradGraph:
    """See `GradGraph.view`."""
    collapse = frozenset(collapse)
    rep, groups = fold_map(self, depth, expand, collapse)
    if not groups:
        return dataclasses.replace(self, collapsed=collapse)
    members: dict[str, list[str]] = {g: [] for g in groups}
    for nid, gid in rep.items():
        if gid != nid:
            members[gid].append(nid)
    flows = Flows(self.by_id, self.edges, self.partials)
    edges = merge_edges(self.edges, rep, flows)
    new_nodes = [n for n in self.nodes if rep[n.id] == n.id]
    entering, leaving = _boundary_flow(self.edges, rep, self.by_id, groups)
    for gid, (path, gcall, scope) in groups.items():
        inside = [self.by_id[m] for m in members[gid]]
        new_nodes.append(
            _module_node(
                gid,
                path,
                gcall,
                scope,
                self.modules.get(path),
                inside,
                (entering.get(gid, []), leaving.get(gid, [])),
                flows,
            )
        )
    return GradGraph(tuple(new_nodes), tuple(edges), self.modules, collapse, self.partials)


def fold_map(
    graph: GradGraph, depth: int | None, expand: Iterable[str], collapse: Iterable[str]
) -> tuple[dict[str, str], dict[str, tuple[str, int | None, Scope]]]:
    """Where each node of `graph` goes in the view folded at `depth`: node id -> its folded
    module call's id (or its own id where it stays), and per folded call (path, call, scope)."""
    expand, collapse = frozenset(expand), frozenset(collapse)

    def folded(path: str, level: int) -> bool:
        if path in collapse:
            return True
        if path in expand:
            return False
        return depth is not None and level >= depth

    rep: dict[str, str] = {}
    groups: dict[str, tuple[str, int | None, Scope]] = {}
    for n in graph.nodes:
        for level, (path, call) in enumerate(n.scope):
            if folded(path, level):
                calls = graph.modules[path].calls if path in graph.modules else 1
                key_call = call if calls > 1 else None
                gid = module_id(path, key_call)
                rep[n.id] = gid
                groups.setdefault(gid, (path, key_call, n.scope[: level + 1]))
                break
        else:
            rep[n.id] = n.id
    return rep, groups


def _module_node(
    gid: str,
    path: str,
    call: int | None,
    scope: Scope,
    info: ModuleScope | None,
    inside: list[GradNode],
    crossing: tuple[list[GradEdge], list[GradEdge]],
    flows: Flows,
) -> GradNode:
    """The node standing for one folded module call; its norm is what entered it from the loss
    side (w.r.t. the module outputs), its status what crossed its boundary (`_status_of`).
    `crossing`: the edges entering it (from the loss side) and leaving it (to its inputs, and
    its parameters' gradients)."""
    entering, leaving = flows.sums(outputs(crossing[0], flows.by_id)), flows.sums(crossing[1])
    mtype = info.type if info else path
    norm, gmax = inflow(entering, inside)
    count = drawn_count(inside)  # what unfolding draws: AccumulateGrad nodes are not drawn
    suffix = "" if call is None else (" (params)" if call == PARAMS_CALL else f" [call {call}]")
    cuts = sorted({m.label.rpartition("\n")[2] for m in inside if m.kind == "ghost"})
    # a module no gradient reached shows its cut
    cut = " · " + " ".join(cuts) if inside and all(m.kind == "ghost" for m in inside) else ""
    param_status, param_text = param_health(inside)
    status = _status_of(inside, (e.status for e in leaving), (e.status for e in entering))
    measured = all(e.measured for e in (*entering, *leaving))
    if not measured:  # never a number of something else (the largest parameter's inside)
        norm, gmax, status = None, None, UNMEASURED
    return GradNode(
        id=gid,
        op=mtype,
        kind="module",
        module=path,
        label=f"{path}{suffix}\n{mtype} · {count} node{'' if count == 1 else 's'}{cut}",
        scope=scope,
        grad_norm=norm,
        grad_max=gmax,
        status=status,
        order=min((m.order for m in inside if m.order is not None), default=None),
        members=tuple(m.id for m in inside),
        param_status=param_status,
        param_text=param_text,
        grad_out=outflow(status, entering, leaving) if measured else None,
        measured=measured,
        forward_note=forward_inside(inside),
    )


def forward_inside(inside: Iterable[GradNode]) -> str:
    """The `forward_note` of a node standing for `inside`: the loss's value where the output
    is inside, and FORWARD_INSIDE where one of them first made a NaN/Inf in the forward pass."""
    inside = list(inside)
    notes = [m.forward_note for m in inside if m.kind == "output" and m.forward_note]
    if any(m.forward_note in (FORWARD_ORIGIN, FORWARD_INSIDE) for m in inside):
        notes.append(FORWARD_INSIDE)
    return " · ".join(notes)


#: node kinds that stand for a leaf itself (its AccumulateGrad too), not for an op's output
PARAM_SIDE = frozenset({*LEAF_KINDS, "accumulate"})


def outputs(entering: list[GradEdge], by_id: Mapping[str, GradNode]) -> list[GradEdge]:
    """What a folded module passed out from its outputs: its entering edges less those from
    a parameter inside it used outside too (a tied embedding's weight in the LM head: that is
    the weight's gradient, not its output's; the box printed 1.84 for GPT-2's wte, whose
    output got 1.05). A group of parameters only (a module called several times) keeps them.

    Example:
        >>> w = GradNode("param:w", "w", "param", "emb", "w")
        >>> out = GradNode("emb/Embedding#0", "Embedding", "op", "emb", "Embedding")
        >>> edges = [GradEdge(out.id, "h", 1.0), GradEdge(w.id, "head", 1.5)]
        >>> [e.src for e in outputs(edges, {w.id: w, out.id: out})]
        ['emb/Embedding#0']
    """
    ops = [e for e in entering if by_id[e.src].kind not in PARAM_SIDE]
    return ops or entering


def outflow(status: str, entering: list[GradEdge], leaving: list[GradEdge]) -> float | None:
    """The norm of what a folded module passed to its inputs and parameters (`leaving`, each
    producer's sum once), when that gave its `status` (its colour) and what entered it from
    the loss side has another: its label then prints both, so an exploding inflow never sits
    in a healthy box unexplained.

    Example:
        >>> into = [GradEdge("a", "b", 3e5, None, "exploding")]
        >>> out = [GradEdge("c", "b", 3.0, None, "healthy"), GradEdge("w", "b", 4.0, None, "healthy")]
        >>> outflow("healthy", into, out)
        5.0
        >>> outflow("exploding", into, [GradEdge("c", "b", 2e5, None, "exploding")]) is None
        True
    """
    came_in = strongest_flow(e.status for e in entering)
    if came_in is None or status == came_in or strongest_flow(e.status for e in leaving) != status:
        return None
    return combine_flow(leaving)[0]


def inflow(
    entering: list[GradEdge], inside: Iterable[GradNode]
) -> tuple[float | None, float | None]:
    """(norm, max |g|) of what reaches a folded group from the loss side: its `entering` edges
    together (each producer's sum once: `Flows.sums`), else (nothing leaves it, e.g. it holds
    the loss) the largest norm inside."""
    norm, gmax = combine_flow(entering) if entering else (None, None)
    if norm is not None:
        return norm, gmax
    best = max(
        (m for m in inside if m.grad_norm is not None),
        key=lambda m: m.grad_norm or 0.0,
        default=None,
    )
    return (best.grad_norm, best.grad_max) if best else (None, None)


def param_health(inside: Iterable[GradNode], where: str = "") -> tuple[str, str]:
    r"""The worst status of the parameters among `inside` (drawn ones and ghosts) and, when it
    is not healthy, what it says: a folded module whose input gradient flows through (drawn
    healthy) still says that its frozen weights get none, as the chart does. `where` follows
    the count of parameters (a ×N group says in how many of its blocks they are).

    Example:
        >>> g = GradNode("ghost:param:w", "Ghost", "ghost", "m", "w\n✂ frozen")
        >>> param_health([g, dataclasses.replace(g, id="ghost:param:b")])
        ('none', '2 params: no gradient (frozen)')
    """
    status, bad, total = param_tally(inside)
    if status in ("", "healthy"):
        return status, ""
    noun = "param" if total == 1 else "params"
    count = f"{len(bad)} {noun}" if len(bad) == total else f"{len(bad)} of {total} {noun}"
    if status == "none":
        cuts = sorted({m.label.rpartition("✂ ")[2] for m in bad if m.kind == "ghost"})
        words = f"no gradient ({', '.join(cuts) or 'None'})"
    else:
        words = style(status).label
    return status, f"{count}{where}: {words}"


def param_tally(inside: Iterable[GradNode]) -> tuple[str, list[GradNode], int]:
    """(worst status, the parameters in it, how many parameters) among `inside`; ("", [], 0)
    when it holds none. The same parameters, and so the same counts, as the report's."""
    params = [m for m in inside if m.kind in ("param", "ghost")]
    if not params:
        return "", [], 0
    status = worst_param(m.status for m in params)
    return status, [m for m in params if m.status == status], len(params)


def merge_edges(edges: Iterable[GradEdge], rep: Mapping[str, str], flows: Flows) -> list[GradEdge]:
    """The edges between folded groups (`rep`: node -> its group), each group pair's edges
    taken together (`flows`: each producer's sum once). Its status is its strongest part's
    (a NaN/Inf part first, `vocabulary.strongest_flow`), as the number it prints is never
    below any part's: one dead block of 160 had drawn ~10 as exactly 0.0. (The view holds no
    thresholds: parts that add up past one keep the status of the largest.)"""
    merged: dict[tuple[str, str], list[GradEdge]] = {}
    for e in edges:
        s, d = rep[e.src], rep[e.dst]
        if s != d:
            merged.setdefault((s, d), []).append(e)
    out = []
    for (s, d), group in merged.items():
        if len(group) == 1:
            out.append(dataclasses.replace(group[0], src=s, dst=d))
            continue
        group = flows.sums(group)
        if not all(e.measured for e in group):  # a part this run did not measure
            out.append(GradEdge(s, d, status=UNMEASURED, measured=False))
            continue
        norm, gmax = combine_flow(group)
        status = strongest_flow(e.status for e in group) or "none"
        out.append(GradEdge(s, d, norm, gmax, status, in_quadrature(group)))
    return out


def _boundary_flow(
    edges: Iterable[GradEdge],
    rep: Mapping[str, str],
    by_id: Mapping[str, GradNode],
    folded: Mapping[str, object],
) -> tuple[dict[str, list[GradEdge]], dict[str, list[GradEdge]]]:
    """Per folded group: the edges its outputs feed (what enters it from the loss side), and
    what leaves it toward its inputs: edges from producers outside, and the gradient of each
    leaf inside, once (its parameters), as an edge from the leaf."""
    entering: dict[str, list[GradEdge]] = {}
    leaving: dict[str, list[GradEdge]] = {}
    leaves: set[str] = set()
    for e in edges:
        s, d = rep[e.src], rep[e.dst]
        if s != d and s in folded:
            entering.setdefault(s, []).append(e)
        if s != d and d in folded:
            leaving.setdefault(d, []).append(e)
        elif s == d and s in folded and e.src not in leaves and by_id[e.src].kind in LEAF_KINDS:
            leaves.add(e.src)
            leaf = by_id[e.src]
            leaving.setdefault(s, []).append(
                GradEdge(leaf.id, s, leaf.grad_norm, leaf.grad_max, leaf.status)
            )
    return entering, leaving


def _status_of(inside: list[GradNode], leaving: Iterable[str], entering: Iterable[str]) -> str:
    """A folded module is coloured by what crosses its boundary, not by the weakest node inside
    (a zero initial state's gradient must not paint an LSTM step dead while a healthy gradient
    leaves it): by the gradient it passes to its inputs and parameters where measured, else by
    what enters it from the loss side, else by its worst node. A NaN/Inf inside always shows;
    the rest of what is inside shows on unfolding."""
    if any(m.status == "nonfinite" for m in inside):
        return "nonfinite"
    for crossing in (leaving, entering):
        flow = strongest_flow(crossing)
        if flow is not None:
            return flow
    return _worst(m.status for m in inside)
