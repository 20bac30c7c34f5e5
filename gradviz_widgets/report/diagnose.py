"""Explanations: why a gradient is None, where a gradient died, where NaN/Inf first appeared."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..graph.grad_graph import GradGraph
from ..graph.nodes import GradEdge
from ..ids import OUTPUT, acc_id, owner_path, param_id
from ..vocabulary import OFF_SCALE, format_norm
from .grad_report import ParamRecord

#: share of exactly-zero gradient elements from which a parameter is called "mostly dead"
MOSTLY_DEAD = 0.9
#: module types whose weight gets a gradient only in the rows the batch indexed
EMBEDDING_TYPES = ("Embedding", "EmbeddingBag")


def none_reason(
    name: str, requires_grad: bool, calls: Mapping[str, int], grad_enabled: Mapping[str, list[bool]]
) -> str:
    """Why parameter `name` got no gradient in this run.

    Example:
        >>> none_reason("frozen.weight", False, {}, {})
        'requires_grad=False (frozen): autograd does not track it'
    """
    if not requires_grad:
        return "requires_grad=False (frozen): autograd does not track it"
    module = owner_path(name)
    where = f"module '{module}'" if module else "the root module"
    if module and calls.get(module, 0) == 0:
        return (
            f"not reached from the loss: {where} was never called in this forward "
            "(an unused module, or a data-dependent branch that was not taken)"
        )
    flags = grad_enabled.get(module, [])
    if flags and not any(flags):
        return (
            f"not reached from the loss: {where} ran under torch.no_grad() "
            "(or inference_mode), so no graph was recorded"
        )
    return (
        f"not reached from the loss: {where} ran, but its result was detached "
        "(.detach() / .data) or did not feed the loss"
    )


def refused_by(graph: GradGraph, leaf_id: str) -> str | None:
    """Why a leaf the graph reaches got no gradient: the op nearest it (toward the loss) that
    got a gradient gave it none (a custom autograd.Function whose backward returns None for
    it); None when the graph lacks the leaf.

    Example:
        >>> from gradviz_widgets.graph.nodes import GradEdge, GradNode
        >>> nodes = [
        ...     GradNode("param:w", "Param", "param", "", "w"),
        ...     GradNode("acc:param:w", "AccumulateGrad", "accumulate", "", ""),
        ...     GradNode("ScaleBackward#0", "ScaleBackward", "op", "", "", grad_norm=1.0),
        ... ]
        >>> edges = [GradEdge("param:w", "acc:param:w"), GradEdge("acc:param:w", "ScaleBackward#0")]
        >>> refused_by(GradGraph(tuple(nodes), tuple(edges), {}), "param:w")[:60]
        'reached from the loss, but ScaleBackward gave it no gradient'
    """
    if acc_id(leaf_id) not in graph:
        return None
    consumers, by_id = graph.consumers(), graph.by_id
    ops: list[str] = []
    seen, todo = {acc_id(leaf_id)}, [acc_id(leaf_id)]
    while todo:
        for e in consumers.get(todo.pop(), ()):
            node = by_id.get(e.dst)
            if node is None or e.dst in seen:
                continue
            seen.add(e.dst)
            if not node.measured:  # a view's run: which op it was is not known
                ops = []
                break
            if node.grad_norm is not None:
                ops.append(node.op)
            else:
                todo.append(e.dst)
    said = ", ".join(list(dict.fromkeys(ops))[:3]) or "an op between it and the loss"
    return (
        f"reached from the loss, but {said} gave it no gradient (None) in backward: a custom "
        "autograd.Function whose backward returns None for it, or an op not differentiable "
        "with respect to it"
    )


def zero_origin(graph: GradGraph, leaf_id: str) -> str | None:
    """The node nearest leaf `leaf_id` (toward the loss) whose gradient turned all zeros.

    That is a consumer that received a non-zero gradient but passed exactly zeros along the
    path back to the leaf: e.g. the ReluBackward0 after a gate whose inputs are all negative.
    Of several at the same distance, the first in edge order. Every node's origin is found in
    one pass over the graph, cached on it (`zero_origins`), so asking for each parameter
    costs the graph once, not once per parameter.
    """
    return zero_origins(graph).get(leaf_id)


def zero_origins(graph: GradGraph) -> Mapping[str, str]:
    """node id -> its zero origin (see `zero_origin`), for every node that has one; once per graph.

    Example:
        >>> from gradviz_widgets.graph.grad_graph import GradEdge, GradNode
        >>> nodes = (GradNode("param:w", "Param", "param", "", "w", grad_norm=0.0),
        ...          GradNode("relu", "ReluBackward0", "op", "", "relu", grad_norm=1.0))
        >>> g = GradGraph(nodes, (GradEdge("param:w", "relu", grad_norm=0.0),), {})
        >>> dict(zero_origins(g))
        {'param:w': 'relu'}
    """
    return graph.memo("zero_origins", lambda: _zero_origins(graph))


def _zero_origins(graph: GradGraph) -> dict[str, str]:
    # distance (edges carrying exact zeros) from each node to the nearest node that received a
    # non-zero gradient, by one breadth-first pass backward from all such nodes at once

    # exact norms are 0.0 only when every element is (what flowed along edges has no max |g|)
    dead_into: dict[str, list[tuple[int, str]]] = {}  # consumer -> (edge index, its producer)
    for i, e in enumerate(graph.edges):
        if e.grad_norm == 0.0:
            dead_into.setdefault(e.dst, []).append((i, e.src))
    if not dead_into:
        return {}
    alive = [n.id for n in graph.nodes if n.grad_norm is not None and n.grad_norm != 0.0]
    live = set(alive)
    # node -> (distance, the first edge in edge order that starts a shortest path from it, that
    # edge's consumer): a node's origin is its consumer's (or that consumer, when alive), the
    # same answer as a breadth-first search from the node itself
    first: dict[str, tuple[int, int, str]] = {}
    ordered: list[str] = []
    level, depth = alive, 1
    while level:  # level by level, in the order a queue would take the nodes
        after: list[str] = []
        for node_id in level:
            for i, src in dead_into.get(node_id, ()):
                seen = first.get(src)
                if seen is None:
                    first[src] = (depth, i, node_id)
                    ordered.append(src)
                    if src not in live:  # a live node ends a path, never extends it
                        after.append(src)
                elif seen[0] == depth and i < seen[1]:
                    first[src] = (depth, i, node_id)
        level, depth = after, depth + 1
    origins: dict[str, str] = {}
    for node_id in ordered:  # in order of distance: a consumer's origin is known before
        dst = first[node_id][2]
        origins[node_id] = dst if dst in live else origins[dst]
    return origins


def nonfinite_origin(graph: GradGraph, loss: float | None = None) -> str | None:
    """The first node in backward order whose outgoing gradient is NaN/Inf while its incoming
    gradient was finite; "output" when the loss itself is not finite (the NaN/Inf came from the
    forward pass, so no backward node is to blame)."""
    if (loss is not None and not math.isfinite(loss)) or graph.node(OUTPUT).status == "nonfinite":
        return OUTPUT
    # what node n sent back in backward flowed along the edges feeding it (dst == n)
    sent_nonfinite = {e.dst for e in graph.edges if e.status == "nonfinite"}
    if not sent_nonfinite:
        return None
    executed = sorted((n for n in graph.nodes if n.order is not None), key=lambda n: n.order or 0)
    for n in executed:
        if n.status != "nonfinite" and n.id in sent_nonfinite:
            return n.id
    return None


def masked_nonfinite(origin: str) -> str:
    """The finding of a NaN/Inf made in backward that no parameter received: an op on the way
    (a ReLU's mask, `torch.where`) replaced it, so every parameter reads finite while the graph
    draws NaN/Inf edges.

    Example:
        >>> masked_nonfinite("SqrtBackward0#0")[:52]
        'NaN/Inf flowed inside the graph from SqrtBackward0#0'
    """
    return (
        f"NaN/Inf flowed inside the graph from {origin} but reached no parameter (an op on the "
        "way, such as a ReLU's mask or torch.where, replaced it): the parameters' gradients "
        "are finite; the graph's NaN/Inf edges show where"
    )


def _nonfinite_findings(
    bad: list[ParamRecord], nonfinite_at: str | None, loss: float, graphed: bool
) -> list[str]:
    """The findings of NaN/Inf: in the loss, in parameters' gradients, or masked on the way."""
    out: list[str] = []
    finite_loss = math.isfinite(loss)
    if not finite_loss:
        first = f", first at {nonfinite_at}" if nonfinite_at not in (None, OUTPUT) else ""
        out.append(
            f"the loss is {format_norm(loss)}: the forward pass produced non-finite values"
            f"{first} (check the inputs and ops like log, sqrt, division)"
        )
    if bad:
        where = f", first at {nonfinite_at}" if nonfinite_at else ""
        if not finite_loss and nonfinite_at not in (None, OUTPUT):
            where = f", from the NaN/Inf the forward made at {nonfinite_at}"
        out.append(f"{_count(bad)} with NaN/Inf gradients{where}: {_names(bad)}")
    elif finite_loss and nonfinite_at is not None and graphed:
        out.append(masked_nonfinite(nonfinite_at))
    return out


def findings(
    params: Sequence[ParamRecord],
    nonfinite_at: str | None,
    loss: float,
    graph: GradGraph | None = None,
) -> tuple[str, ...]:
    """Short sentences for the status line, most severe first. With the run's `graph`,
    embedding weights (`embedding_like`) are told apart from dense layers: their zero rows
    are the rows this batch did not index, not dead units."""
    by: dict[str, list[ParamRecord]] = {}
    for p in params:
        by.setdefault(p.status, []).append(p)
    out = _nonfinite_findings(by.get("nonfinite", []), nonfinite_at, loss, graph is not None)
    if by.get("exploding"):
        out.append(f"{_count(by['exploding'])} with exploding gradients: {_names(by['exploding'])}")
    if by.get("none"):
        out.append(
            f"{_count(by['none'])} get{'s' if len(by['none']) == 1 else ''} no gradient: "
            + ", ".join(
                f"{p.name} ({(p.none_reason or 'no reason').split(':')[0]})" for p in by["none"][:4]
            )
            + ("…" if len(by["none"]) > 4 else "")
        )
    if by.get("zero"):
        origins = sorted({p.zero_origin for p in by["zero"] if p.zero_origin})
        where = f", the gradient dies at {', '.join(origins[:3])}" if origins else ""
        out.append(f"{_count(by['zero'])} with gradient exactly 0.0{where}: {_names(by['zero'])}")
    sparse = [
        p
        for p in params
        if p.status not in OFF_SCALE
        and p.zero_fraction is not None
        and p.zero_fraction >= MOSTLY_DEAD
    ]
    unindexed = _embedding_tables(graph, sparse) if graph is not None else []
    mostly = [p for p in sparse if p not in unindexed]
    if mostly:
        out.append(
            f"{_count(mostly)} mostly dead (≥{MOSTLY_DEAD:.0%} of gradient elements exactly "
            "0.0): "
            + ", ".join(f"{p.name} {p.zero_fraction:.0%}" for p in mostly[:4])
            + ("…" if len(mostly) > 4 else "")
        )
    if by.get("vanishing"):
        out.append(f"{_count(by['vanishing'])} with vanishing gradients: {_names(by['vanishing'])}")
    out.extend(unused_rows(p) for p in unindexed)
    return tuple(out)


def embedding_like(graph: GradGraph, name: str, used: Sequence[GradEdge]) -> bool:
    """Whether parameter `name` is an embedding table: the weight of an Embedding/EmbeddingBag
    module, or a tensor that only embedding lookups read (`F.embedding` in a custom module).
    `used`: the edges its AccumulateGrad node feeds."""
    info = graph.modules.get(owner_path(name))
    if info is not None and info.type in EMBEDDING_TYPES and name.endswith(".weight"):
        return True
    return bool(used) and all(graph.node(e.dst).op.startswith(EMBEDDING_TYPES) for e in used)


def _embedding_tables(graph: GradGraph, params: Sequence[ParamRecord]) -> list[ParamRecord]:
    """The `params` that are `embedding_like`, their consumers found in one pass over the edges
    (the graph's whole edge map costs more for the one or two parameters asked about)."""
    if not params:
        return []
    leaves = {acc_id(param_id(p.name)) for p in params}
    used: dict[str, list[GradEdge]] = {}
    for e in graph.edges:
        if e.src in leaves:
            used.setdefault(e.src, []).append(e)
    out = []
    for p in params:
        leaf = acc_id(param_id(p.name))
        if embedding_like(graph, p.name, used.get(leaf, ()) if leaf in graph else ()):
            out.append(p)
    return out


def unused_rows(p: ParamRecord) -> str:
    """The sentence for an embedding whose gradient is mostly zero rows: normal sparsity.
    Rows are counted from the share of exact zeros, so the count is a bound: a used row with
    exact zeros in some columns (an `EmbeddingBag(mode="max")` row gets a gradient only where
    it won the max) adds to it.

    Example:
        >>> from gradviz_widgets.report.grad_report import ParamRecord
        >>> unused_rows(ParamRecord("emb.weight", "emb", (1000, 8), "float32", True, 0.5, 0.1,
        ...                         "healthy", zero_fraction=0.994))
        'emb.weight: up to 994 of 1,000 rows not used by this batch (99.4% of its gradient is exactly 0.0; an embedding: only the rows it uses get a gradient)'
    """
    rows = p.shape[0] if p.shape else 1
    share = p.zero_fraction or 0.0
    unused = math.floor(share * rows + 1e-9)
    return (
        f"{p.name}: up to {unused:,} of {rows:,} rows not used by this batch ({share:.1%} of "
        "its gradient is exactly 0.0; an embedding: only the rows it uses get a gradient)"
    )


def _count(items: Sequence[Any]) -> str:
    return f"{len(items)} parameter{'s' if len(items) != 1 else ''}"


def _names(items: Sequence[ParamRecord], limit: int = 4) -> str:
    names = ", ".join(p.name for p in items[:limit])
    return names + ("…" if len(items) > limit else "")
