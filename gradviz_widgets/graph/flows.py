"""What flowed along several edges of a GradGraph, taken together.

An edge carries the gradient one consumer passed back to one producer. A producer whose
output fed several consumers got the sum of their pieces, whose norm is not their norms added
in quadrature (two pieces of opposite sign cancel): where a set of edges holds every consumer
edge of a producer, the producer's own norm (measured on the sum) stands for them; where it
holds the edges of the consumers inside one module call, or one container (a ModuleList of
blocks, which a ×N group of them all takes), the run measured their sum too (`PartialFlow`,
trace/partials.py). Other pieces of one producer stay in quadrature (`in_quadrature`).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable, Mapping

from ..vocabulary import combine_norms
from .nodes import GradEdge, GradNode


def flow_max(norm: float | None) -> float | None:
    """max |g| of what flowed along an edge or into an op node: only the norm is measured there
    (it is what the graph shows), so max |g| is 0.0 where the norm is (exact sums of squares
    are 0 only when every element is) and None otherwise.

    Example:
        >>> flow_max(0.0), flow_max(2.5), flow_max(None)
        (0.0, None, None)
    """
    return 0.0 if norm == 0.0 else None


@dataclasses.dataclass(frozen=True)
class PartialFlow:
    """The norm of what the consumers `dsts` (sorted, with repeats) of `src` sent it together:
    the consumers inside one module call (or container) of a producer read outside it too."""

    src: str
    dsts: tuple[str, ...]
    grad_norm: float | None
    status: str


class Flows:
    """The edges of one graph (`by_id`: its nodes) by producer, to take sets of them together
    (`partials`: the sums the run measured for the consumers inside one module call or
    container).

    Example:
        >>> h = GradNode("h", "Tanh", "op", "", "Tanh", grad_norm=0.003, status="healthy")
        >>> pieces = (GradEdge("h", "a", 9.8, None, "healthy"), GradEdge("h", "b", 9.8, None, "healthy"))
        >>> [(e.src, e.grad_norm) for e in Flows({"h": h}, pieces).sums(list(pieces))]
        [('h', 0.003)]
        >>> more = (*pieces, GradEdge("h", "c", 1.0, None, "healthy"))
        >>> inside = PartialFlow("h", ("a", "b"), 0.002, "healthy")
        >>> [(e.src, e.grad_norm) for e in Flows({"h": h}, more, (inside,)).sums(list(pieces))]
        [('h', 0.002)]
    """

    def __init__(
        self,
        by_id: Mapping[str, GradNode],
        edges: Iterable[GradEdge],
        partials: Iterable[PartialFlow] = (),
    ) -> None:
        self.by_id = by_id
        self.consumers = collections.Counter(e.src for e in edges)
        self.partials = {(p.src, p.dsts): p for p in partials}

    def sums(self, edges: list[GradEdge]) -> list[GradEdge]:
        """`edges`, with the pieces of each producer that fed only consumers among them
        replaced by one edge carrying the producer's own gradient."""
        by_src: dict[str, list[GradEdge]] = {}
        for e in edges:
            by_src.setdefault(e.src, []).append(e)
        if len(by_src) == len(edges):
            return edges
        out: list[GradEdge] = []
        for src, pieces in by_src.items():
            node = self.by_id.get(src)
            whole = len(pieces) > 1 and self.consumers[src] == len(pieces)
            part = self.partials.get((src, tuple(sorted(e.dst for e in pieces))))
            if whole and node is not None and node.grad_norm is not None:
                out.append(GradEdge(src, pieces[0].dst, node.grad_norm, node.grad_max, node.status))
            elif len(pieces) > 1 and part is not None:
                top = flow_max(part.grad_norm)
                out.append(GradEdge(src, pieces[0].dst, part.grad_norm, top, part.status))
            else:
                out.extend(pieces)
        return out


def in_quadrature(summed: Iterable[GradEdge]) -> bool:
    """Whether edges taken together (after `Flows.sums`) still hold several pieces of one
    producer: their combined norm then adds those in quadrature, an approximation of the
    norm of their sum, which the run did not measure.

    Example:
        >>> a, b = GradEdge("h", "q", 3.0), GradEdge("h", "k", 4.0)
        >>> in_quadrature([a, b]), in_quadrature([a, GradEdge("w", "k", 4.0)])
        (True, False)
    """
    srcs = [e.src for e in summed]
    return len(set(srcs)) < len(srcs)


def combine_flow(edges: Iterable[GradEdge]) -> tuple[float | None, float | None]:
    """(norm, max |g|) of several edges' flows together, as distinct tensors: the max only
    where every measured edge has one (edges carry their norm only; 0.0 where nothing but
    zeros flowed)."""
    edges = list(edges)
    norm = combine_norms([e.grad_norm for e in edges])
    measured = [e for e in edges if e.grad_norm is not None]
    if norm is None:
        return None, None
    if all(e.grad_max is not None for e in measured):
        return norm, max((e.grad_max for e in measured), default=None)  # type: ignore[type-var]
    return norm, flow_max(norm)


__all__ = ["Flows", "PartialFlow", "combine_flow", "flow_max", "in_quadrature"]
