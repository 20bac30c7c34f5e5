"""`diagnose.zero_origins` against a breadth-first search from each node, on random graphs
(ties between paths of equal length, duplicate edges, None / NaN norms): no torch needed."""

from __future__ import annotations

import math
import random
from collections import deque

import pytest

from gradviz_widgets.graph.grad_graph import GradEdge, GradGraph, GradNode
from gradviz_widgets.report import diagnose

NODE_NORMS = (None, 0.0, 0.0, 0.0, 1.0, math.nan)
EDGE_NORMS = (0.0, 0.0, 0.0, 1.0, None, math.nan)


def _search(graph: GradGraph, start: str) -> str | None:
    """The nearest node toward the loss that received a non-zero gradient, along edges that
    carried exact zeros; of several at one distance, the first in breadth-first edge order."""
    consumers: dict[str, list[GradEdge]] = {}
    for e in graph.edges:
        consumers.setdefault(e.src, []).append(e)
    seen, queue = {start}, deque([start])
    while queue:
        for e in consumers.get(queue.popleft(), ()):
            if e.grad_norm != 0.0 or e.dst in seen:
                continue
            if graph.node(e.dst).grad_norm not in (None, 0.0):
                return e.dst
            seen.add(e.dst)
            queue.append(e.dst)
    return None


def _random_graph(rng: random.Random, size: int) -> GradGraph:
    """A random DAG: edges run from a node to a later one (producer -> consumer)."""
    nodes = tuple(
        GradNode(f"n{i}", "Op", "op", "", f"n{i}", grad_norm=rng.choice(NODE_NORMS))
        for i in range(size)
    )
    edges = []
    for _ in range(size * 2):
        a, b = sorted(rng.sample(range(size), 2))
        edges.append(GradEdge(f"n{a}", f"n{b}", grad_norm=rng.choice(EDGE_NORMS)))
        if rng.random() < 0.1:  # the same pair twice (an op using one input twice)
            edges.append(GradEdge(f"n{a}", f"n{b}", grad_norm=rng.choice(EDGE_NORMS)))
    rng.shuffle(edges)
    return GradGraph(nodes, tuple(edges), {})


@pytest.mark.parametrize("seed", range(40))
def test_zero_origins_match_a_search_from_each_node(seed: int) -> None:
    rng = random.Random(seed)
    graph = _random_graph(rng, rng.randint(2, 60))
    slow = {n.id: _search(graph, n.id) for n in graph.nodes}
    assert dict(diagnose.zero_origins(graph)) == {k: v for k, v in slow.items() if v is not None}


def test_ties_go_to_the_first_edge_in_edge_order() -> None:
    nodes = (
        GradNode("leaf", "Param", "param", "", "leaf", grad_norm=0.0),
        GradNode("a", "Op", "op", "", "a", grad_norm=0.0),
        GradNode("b", "Op", "op", "", "b", grad_norm=0.0),
        GradNode("late", "Op", "op", "", "late", grad_norm=1.0),
        GradNode("early", "Op", "op", "", "early", grad_norm=1.0),
    )
    edges = (
        GradEdge("b", "early", grad_norm=0.0),
        GradEdge("a", "late", grad_norm=0.0),
        GradEdge("leaf", "a", grad_norm=0.0),  # first: through a, although b's edge comes first
        GradEdge("leaf", "b", grad_norm=0.0),
    )
    origins = diagnose.zero_origins(GradGraph(nodes, edges, {}))
    assert dict(origins) == {"leaf": "late", "a": "late", "b": "early"}
