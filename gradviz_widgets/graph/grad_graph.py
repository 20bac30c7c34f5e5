"""GradGraph: the backward graph of one run as frozen plain data, and views of it by module.

Edges point the way data flowed forward (producer -> consumer), as torchviz draws them;
gradients flowed the other way, and each edge carries the norm of what flowed along it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from ..errors import GradExplorerError
from ..ids import similar_ids
from .flows import PartialFlow
from .nodes import GradEdge, GradNode, ModuleScope, drawn_count
from .scopes import align_param_scopes

GROUP_ABOVE = 150

T = TypeVar("T")


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
    #: sums of what one module call's consumers sent a producer read outside it too
    partials: tuple[PartialFlow, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "modules", MappingProxyType(dict(self.modules)))
        # parameters in the call that used them: each module drawn once (graph/scopes.py)
        object.__setattr__(self, "nodes", align_param_scopes(tuple(self.nodes), self.modules))
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
        result: T = cache[key]
        return result

    def consumers(self) -> Mapping[str, tuple[GradEdge, ...]]:
        """node id -> the edges it feeds (in edge order), built once per graph."""
        return self.memo("consumers", lambda: _edge_map(self.edges))

    def node(self, node_id: str) -> GradNode:
        """The node with this id (KeyError names close matches)."""
        try:
            return self.by_id[node_id]
        except KeyError:
            close = similar_ids(node_id, list(self.by_id))
            raise KeyError(f"no node {node_id!r} in the graph; similar: {close}") from None

    @property
    def by_id(self) -> Mapping[str, GradNode]:
        """node id -> node."""
        by_id: Mapping[str, GradNode] = self._by_id  # type: ignore[attr-defined]
        return by_id

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.by_id

    @property
    def max_depth(self) -> int:
        """Deepest module-call nesting of any node."""
        return max((len(n.scope) for n in self.nodes), default=0)

    def nodes_of(self, module: str) -> list[GradNode]:
        """Nodes created inside `module` or its submodules (by call nesting or by path)."""
        prefix = module + "."
        return [
            n
            for n in self.nodes
            if any(p == module for p, _ in n.scope)
            or n.module == module
            or n.module.startswith(prefix)
        ]

    def view(
        self,
        depth: int | None = None,
        expand: Iterable[str] = (),
        collapse: Iterable[str] = (),
        group: bool | None = None,
    ) -> GradGraph:
        """The graph with module calls folded into single nodes.

        `group`: fold runs of identical sibling modules into "×N" nodes (graph/groups.py;
        None: when the view draws more than GROUP_ABOVE nodes); a group id in `expand`
        (`group:h.0-11`) unfolds that run.

        A module call nested `depth` or more levels down is folded (depth=0 folds every
        top-level module, depth=1 shows the top level open and folds its children), unless its
        path is in `expand`; a path in `collapse` is always folded. `depth=None` folds nothing
        except `collapse`. Edges between folded groups are kept (parallel ones merged).

        Example:
            >>> small = graph.view(depth=1)            # doctest: +SKIP
            >>> small.node("module:layer1").members    # doctest: +SKIP
        """
        from .groups import group_runs, param_shapes
        from .view import fold

        expand, collapse = view_args(depth, expand, collapse, group)
        folded = fold(self, depth, expand, collapse)
        if group is None:  # big views only: runs of identical blocks become "×N" groups
            group = drawn_count(folded.nodes) > GROUP_ABOVE
        if not group:
            return folded
        return group_runs(folded, expand, shapes=param_shapes(self), source=self)

    def auto_depth(self, max_nodes: int = 120) -> int | None:
        """Deepest fold depth whose view has at most `max_nodes` nodes (None: no folding needed)."""
        if len(self.nodes) <= max_nodes:
            return None
        for depth in range(self.max_depth - 1, -1, -1):
            if len(self.view(depth).nodes) <= max_nodes:
                return depth
        return 0


def _edge_map(edges: Iterable[GradEdge]) -> Mapping[str, tuple[GradEdge, ...]]:
    out: dict[str, list[GradEdge]] = {}
    for e in edges:
        out.setdefault(e.src, []).append(e)
    return {k: tuple(v) for k, v in out.items()}  # plain: graphs stay picklable


def view_args(
    depth: object, expand: object, collapse: object, group: object
) -> tuple[frozenset[str], frozenset[str]]:
    """`GradGraph.view`'s arguments checked (GradExplorerError naming the one that is wrong);
    `expand` and `collapse` as sets of paths.

    Example:
        >>> view_args(1, ["layer1"], (), None)
        (frozenset({'layer1'}), frozenset())
        >>> view_args("1", (), (), None)
        Traceback (most recent call last):
        ...
        gradviz_widgets.errors.GradExplorerError: depth must be an int >= 0 or None (fold nothing), got '1'
    """
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 0):
        raise GradExplorerError(f"depth must be an int >= 0 or None (fold nothing), got {depth!r}")
    if group is not None and not isinstance(group, bool):
        raise GradExplorerError(f"group must be True, False or None (automatic), got {group!r}")
    paths = []
    for name, value in (("expand", expand), ("collapse", collapse)):
        if isinstance(value, str) or not isinstance(value, Iterable):
            raise GradExplorerError(
                f"{name} must be a list of module paths (e.g. [{value!r}]), got {value!r}"
            )
        items = list(value)
        if not all(isinstance(v, str) for v in items):
            raise GradExplorerError(f"{name} must hold module paths (str), got {items!r}")
        paths.append(frozenset(items))
    return paths[0], paths[1]


__all__ = ["GradGraph", "view_args"]
