"""GradGraph: the backward graph of one run as frozen plain data, and views of it by module.

Edges point the way data flowed forward (producer -> consumer), as torchviz draws them;
gradients flowed the other way, and each edge carries the norm of what flowed along it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from .attribution import LOSS_SCOPE, Scope
from .stats import combine_norms

LEAF_KINDS = ("param", "input", "tensor")

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class GradNode:
    """One node: an autograd op, a leaf tensor, the loss output, or a collapsed module call.

    `grad_norm` / `grad_max` describe the gradient w.r.t. what this node produced, as it
    arrived in this run (None when no gradient reached it).
    """

    id: str
    op: str
    kind: str  # "op" | "accumulate" | "param" | "input" | "tensor" | "output" | "module"
    module: str
    label: str
    scope: Scope = ()
    shape: tuple[int, ...] | None = None
    grad_norm: float | None = None
    grad_max: float | None = None
    status: str = "none"
    order: int | None = None  # position in backward execution
    members: tuple[str, ...] = ()  # for kind == "module": the node ids folded into it


@dataclasses.dataclass(frozen=True)
class GradEdge:
    """Producer `src` fed consumer `dst` in forward; `grad_norm` flowed dst -> src in backward."""

    src: str
    dst: str
    grad_norm: float | None = None
    grad_max: float | None = None
    status: str = "none"


@dataclasses.dataclass(frozen=True)
class ModuleScope:
    """One module of the model (or the "loss" pseudo-module) in the module tree."""

    path: str
    type: str
    calls: int
    parent: str | None
    children: tuple[str, ...]
    params: tuple[str, ...]

    @property
    def depth(self) -> int:
        return 0 if self.path == "" else self.path.count(".") + 1


@dataclasses.dataclass(frozen=True)
class GradGraph:
    """Nodes, edges and the module tree of one backward graph.

    Example:
        >>> g = GradGraph(nodes=(GradNode("output", "Output", "output", "loss", "loss"),),
        ...               edges=(), modules={})
        >>> g.node("output").kind
        'output'
    """

    nodes: tuple[GradNode, ...]
    edges: tuple[GradEdge, ...]
    modules: Mapping[str, ModuleScope]
    collapsed: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        object.__setattr__(self, "modules", MappingProxyType(dict(self.modules)))
        object.__setattr__(self, "_by_id", {n.id: n for n in self.nodes})
        object.__setattr__(self, "_memo", {})

    def memo(self, key: str, build: Callable[[], T]) -> T:
        """`build()` once per graph, then the same result: analyses that walk the whole graph
        (edge maps, zero origins) are computed once however many parameters ask.

        Example:
            >>> g = GradGraph(nodes=(), edges=(), modules={})
            >>> g.memo("answer", lambda: 42), g.memo("answer", lambda: 0)
            (42, 42)
        """
        cache: dict[str, Any] = self._memo  # type: ignore[attr-defined]
        if key not in cache:
            cache[key] = build()
        return cache[key]

    def consumers(self) -> Mapping[str, tuple[GradEdge, ...]]:
        """node id -> the edges it feeds (in edge order), built once per graph."""
        return self.memo("consumers", lambda: _edge_map(self.edges))

    def node(self, node_id: str) -> GradNode:
        """The node with this id (KeyError names close matches)."""
        try:
            return self._by_id[node_id]  # type: ignore[attr-defined]
        except KeyError:
            close = [i for i in self._by_id if node_id.split("/")[-1] in i][:5]  # type: ignore[attr-defined]
            raise KeyError(f"no node {node_id!r} in the graph; similar: {close}") from None

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._by_id  # type: ignore[attr-defined]

    @property
    def max_depth(self) -> int:
        """Deepest module-call nesting of any node."""
        return max((len(n.scope) for n in self.nodes), default=0)

    def nodes_of(self, module: str) -> list[GradNode]:
        """Nodes created inside `module` or its submodules (by call nesting or by path)."""
        prefix = module + "."
        return [n for n in self.nodes
                if any(p == module for p, _ in n.scope) or n.module == module
                or n.module.startswith(prefix)]

    def view(
        self,
        depth: int | None = None,
        expand: Iterable[str] = (),
        collapse: Iterable[str] = (),
    ) -> GradGraph:
        """The graph with module calls folded into single nodes.

        A module call nested `depth` or more levels down is folded (depth=0 folds every
        top-level module, depth=1 shows the top level open and folds its children), unless its
        path is in `expand`; a path in `collapse` is always folded. `depth=None` folds nothing
        except `collapse`. Edges between folded groups are kept (parallel ones merged).

        Example:
            >>> small = graph.view(depth=1)            # doctest: +SKIP
            >>> small.node("module:layer1").members    # doctest: +SKIP
        """
        expand, collapse = frozenset(expand), frozenset(collapse)

        def folded(path: str, level: int) -> bool:
            if path in collapse:
                return True
            if path in expand:
                return False
            return depth is not None and level >= depth

        rep: dict[str, str] = {}
        groups: dict[str, tuple[str, int | None, Scope]] = {}
        for n in self.nodes:
            for level, (path, call) in enumerate(n.scope):
                if folded(path, level):
                    calls = self.modules[path].calls if path in self.modules else 1
                    key_call = call if calls > 1 else None
                    gid = f"module:{path}" + ("" if key_call is None else
                                              ("@params" if call < 0 else f"@{call}"))
                    rep[n.id] = gid
                    groups.setdefault(gid, (path, key_call, n.scope[: level + 1]))
                    break
            else:
                rep[n.id] = n.id
        if not groups:
            return dataclasses.replace(self, collapsed=collapse)
        members: dict[str, list[str]] = {g: [] for g in groups}
        for nid, gid in rep.items():
            if gid != nid:
                members[gid].append(nid)
        edges = _merge_edges(self.edges, rep)
        new_nodes = [n for n in self.nodes if rep[n.id] == n.id]
        entering, leaving = _boundary_flow(self.edges, rep, self._by_id)  # type: ignore[attr-defined]
        for gid, (path, call, scope) in groups.items():
            inside = [self._by_id[m] for m in members[gid]]  # type: ignore[attr-defined]
            new_nodes.append(_module_node(
                gid, path, call, scope, self.modules.get(path), inside,
                entering.get(gid, []), leaving.get(gid, [])))
        return GradGraph(tuple(new_nodes), tuple(edges), self.modules, collapse)

    def auto_depth(self, max_nodes: int = 120) -> int | None:
        """Deepest fold depth whose view has at most `max_nodes` nodes (None: no folding needed)."""
        if len(self.nodes) <= max_nodes:
            return None
        for depth in range(self.max_depth - 1, -1, -1):
            if len(self.view(depth).nodes) <= max_nodes:
                return depth
        return 0


def _module_node(gid: str, path: str, call: int | None, scope: Scope, info: ModuleScope | None,
                 inside: list[GradNode], entering: list[GradEdge], leaving: list[str]
                 ) -> GradNode:
    """The node standing for one folded module call; its norm is what entered it from the loss
    side (w.r.t. the module outputs), its status what crossed its boundary (`_status_of`)."""
    mtype = info.type if info else path
    norm, gmax = _combine(entering) if entering else (None, None)
    if norm is None:  # nothing left the group (e.g. it holds the loss): its largest inflow
        best = max((m for m in inside if m.grad_norm is not None), key=lambda m: m.grad_norm,
                   default=None)
        norm, gmax = (best.grad_norm, best.grad_max) if best else (None, None)
    suffix = "" if call is None else (" (params)" if call < 0 else f" [call {call}]")
    return GradNode(
        id=gid, op=mtype, kind="module", module=path,
        label=f"{path}{suffix}\n{mtype} · {len(inside)} nodes", scope=scope,
        grad_norm=norm, grad_max=gmax,
        status=_status_of(inside, leaving, (e.status for e in entering)),
        order=min((m.order for m in inside if m.order is not None), default=None),
        members=tuple(m.id for m in inside))


def _merge_edges(edges: Iterable[GradEdge], rep: Mapping[str, str]) -> list[GradEdge]:
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
        norm, gmax = _combine(group)
        status = _worst(e.status for e in group)
        out.append(GradEdge(s, d, norm, gmax, status))
    return out


def _edge_map(edges: Iterable[GradEdge]) -> Mapping[str, tuple[GradEdge, ...]]:
    out: dict[str, list[GradEdge]] = {}
    for e in edges:
        out.setdefault(e.src, []).append(e)
    return {k: tuple(v) for k, v in out.items()}  # plain: graphs stay picklable


def _boundary_flow(edges: Iterable[GradEdge], rep: Mapping[str, str],
                   by_id: Mapping[str, GradNode]) -> tuple[dict[str, list[GradEdge]],
                                                           dict[str, list[str]]]:
    """Per folded group: the edges its outputs feed (what enters it from the loss side), and
    the statuses of what leaves it toward its inputs (edges from producers outside, and the
    gradients of the leaves inside: its parameters)."""
    entering: dict[str, list[GradEdge]] = {}
    leaving: dict[str, list[str]] = {}
    for e in edges:
        s, d = rep[e.src], rep[e.dst]
        if s != d and s.startswith("module:"):
            entering.setdefault(s, []).append(e)
        if s != d and d.startswith("module:"):
            leaving.setdefault(d, []).append(e.status)
        elif s == d and s.startswith("module:") and by_id[e.src].kind in LEAF_KINDS:
            leaving.setdefault(s, []).append(by_id[e.src].status)
    return entering, leaving


def _combine(edges: list[GradEdge]) -> tuple[float | None, float | None]:
    norm = combine_norms([e.grad_norm for e in edges])
    maxes = [e.grad_max for e in edges if e.grad_max is not None]
    return norm, (max(maxes) if maxes and norm is not None else None)


_SEVERITY = ("nonfinite", "exploding", "zero", "vanishing", "healthy", "none")


def _worst(statuses: Iterable[str]) -> str:
    found = set(statuses)
    for s in _SEVERITY:
        if s in found:
            return s
    return "none"


#: what leaves a module, from several edges: one healthy path makes the whole flow healthy
_STRONGEST = ("nonfinite", "exploding", "healthy", "vanishing", "zero")


def _status_of(inside: list[GradNode], leaving: Iterable[str], entering: Iterable[str]) -> str:
    """A folded module is coloured by what crosses its boundary, not by the weakest node inside
    (a zero initial state's gradient must not paint an LSTM step dead while a healthy gradient
    leaves it): by the gradient it passes to its inputs and parameters where measured, else by
    what enters it from the loss side, else by its worst node. A NaN/Inf inside always shows;
    the rest of what is inside shows on unfolding."""
    if any(m.status == "nonfinite" for m in inside):
        return "nonfinite"
    for crossing in (set(leaving), set(entering)):
        for s in _STRONGEST:
            if s in crossing:
                return s
    return _worst(m.status for m in inside)


__all__ = ["GradEdge", "GradGraph", "GradNode", "LEAF_KINDS", "LOSS_SCOPE", "ModuleScope"]
