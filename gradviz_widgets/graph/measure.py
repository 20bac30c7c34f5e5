"""Which edges and nodes a run measures when only one view of the graph is to be drawn.

Measuring what flows along every edge reads every activation gradient once more in float64:
~10 % of a ResNet-50 step, while a view folded at depth 1 draws a few dozen of its ~1,000
edges. `flow_scope` names, from the previous run's graph, what a view's numbers are made of:
the nodes drawn unfolded, the producer of each edge that crosses a folded module's boundary
(a set of edges holding all of a producer's pieces is drawn with its own norm: `Flows.sums`),
and the crossing edges themselves, unless all of their producer's pieces go into one place.
An edge or node the previous graph did not have is measured too (the model took another
path). Nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from .grad_graph import GradGraph, view_args
from .view import fold_map


@dataclasses.dataclass(frozen=True)
class FlowScope:
    """What a run measures (`edge`, `node`).

    Example:
        >>> scope = FlowScope(frozenset({"a", "b", "c"}), frozenset({"a"}), frozenset({("b", "a")}))
        >>> scope.edge("b", "a"), scope.edge("c", "b"), scope.edge("new", "b")
        (True, False, True)
        >>> scope.node("a"), scope.node("b"), scope.node("new")
        (True, False, True)
    """

    known: frozenset[str]  # every node of the graph the scope was made from
    nodes: frozenset[str]
    edges: frozenset[tuple[str, str]]

    def edge(self, src: str, dst: str) -> bool:
        """Whether the flow along src -> dst is measured."""
        return (src, dst) in self.edges or src not in self.known or dst not in self.known

    def node(self, node_id: str) -> bool:
        """Whether what reached this node is measured."""
        return node_id in self.nodes or node_id not in self.known


def flow_scope(
    graph: GradGraph,
    depth: int | None = None,
    expand: Iterable[str] = (),
    collapse: Iterable[str] = (),
) -> FlowScope:
    """What a run must measure for `graph.view(depth, expand, collapse)` (grouped into ×N runs
    or not: a group's edges are among those of the folded view) to read as in a run that
    measured everything.

    Example:
        >>> from gradviz_widgets.graph.nodes import GradEdge, GradNode
        >>> nodes = (GradNode("a", "Mm", "op", "m", "Mm", scope=(("m", 0),)),
        ...          GradNode("b", "Relu", "op", "m", "Relu", scope=(("m", 0),)),
        ...          GradNode("output", "Output", "output", "", "loss"))
        >>> g = GradGraph(nodes, (GradEdge("a", "b"), GradEdge("b", "output")), {})
        >>> scope = flow_scope(g, depth=0)
        >>> sorted(scope.edges), sorted(scope.nodes)
        ([('b', 'output')], ['b', 'output'])
    """
    expand, collapse = view_args(depth, expand, collapse, None)
    rep, _ = fold_map(graph, depth, expand, collapse)
    nodes = {n for n, r in rep.items() if n == r}
    crossing: set[tuple[str, str]] = set()
    for src, out in graph.consumers().items():
        cross = [e for e in out if rep[e.src] != rep[e.dst]]
        if not cross:
            continue
        nodes.add(src)  # a set holding all its pieces takes its own norm (Flows.sums)
        if len(out) > 1 and len(cross) == len(out) and len({rep[e.dst] for e in out}) == 1:
            continue  # every piece goes into one place: drawn as the producer's own norm
        crossing.update((e.src, e.dst) for e in cross)
    return FlowScope(frozenset(rep), frozenset(nodes), frozenset(crossing))


def unmeasured(graph: GradGraph) -> tuple[int, int]:
    """(nodes, edges) of `graph` whose flow its run did not measure.

    Example:
        >>> from gradviz_widgets.graph.nodes import GradEdge
        >>> unmeasured(GradGraph((), (GradEdge("a", "b", measured=False),), {}))
        (0, 1)
    """
    return sum(not n.measured for n in graph.nodes), sum(not e.measured for e in graph.edges)


def drawn_measured(view: GradGraph) -> bool:
    """Whether everything `view` draws was measured by its run.

    Example:
        >>> from gradviz_widgets.graph.nodes import GradEdge
        >>> drawn_measured(GradGraph((), (GradEdge("a", "b", measured=False),), {}))
        False
    """
    return unmeasured(view) == (0, 0)


__all__ = ["FlowScope", "drawn_measured", "flow_scope", "unmeasured"]
