"""Turning one run's raw graph and gradient numbers into the frozen GradGraph and GradReport.

Tied parameters: a Parameter reachable under several names (a tied embedding and LM head, a
module held under two attribute names) is one ParamRecord, under the name `named_parameters()`
gives it, and counts once in the `module_norms` of *every* module that holds it under any name.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from torch import nn

from .. import ids
from ..graph.flows import PartialFlow, flow_max
from ..graph.grad_graph import GradGraph
from ..graph.nodes import FORWARD_ORIGIN, GradEdge, GradNode, ModuleScope, maker
from ..report import diagnose
from ..report.grad_report import GradReport, ParamRecord
from ..trace.walk import Measured, RawEdge, RawGraph, RawNode
from ..vocabulary import UNMEASURED, Thresholds, classify_lists, combine_norms
from .model_state import ModelIndex
from .state import RunState

Pair = tuple[float, float]

#: none reason for parameters inside a reentrant checkpoint whose inputs need no grad
CHECKPOINT_NO_GRAD = (
    "not reached from the loss: it ran inside torch.utils.checkpoint(use_reentrant=True) whose "
    "inputs need no grad, so the checkpoint output is cut off from the graph (plain backward "
    "gives no gradient either); use checkpoint(..., use_reentrant=False)"
)


def freeze_graph(state: RunState) -> GradGraph:
    """The frozen graph: every node and edge with its norm pair and status."""
    raw, thresholds = state.raw, state.settings.thresholds
    assert raw is not None
    raws = list(raw.nodes.values())
    norms, maxes = _node_pairs(raws, state.values, state.leaf_pairs)
    statuses = classify_lists(norms, maxes, thresholds)
    make = maker(GradNode, 11)  # the fields up to `order`; members and the rest: defaults
    nodes = tuple(
        make(n.id, n.op, n.kind, n.module, _label(n), n.scope, n.shape, norm, gmax, status, n.order)
        for n, norm, gmax, status in zip(raws, norms, maxes, statuses, strict=True)
    )
    tree = _module_tree(state.index, state.tracker.calls)
    edges = _edges(state, raw, thresholds)
    if not state.settings.track_flow:
        _mark_unmeasured(_NOTHING, raw, nodes, edges)
    elif state.settings.flow_scope is not None:
        _mark_unmeasured(state.settings.flow_scope, raw, nodes, edges)
    _note_forward(state, nodes)
    return GradGraph(nodes, edges, tree, partials=_partials(state, thresholds))


class _Nothing:
    """The flow scope of a run without flow tracking (`track_flow=False`): no edge, no node."""

    def edge(self, src: str, dst: str) -> bool:
        return False

    def node(self, node_id: str) -> bool:
        return False


_NOTHING = _Nothing()


def _mark_unmeasured(
    scope: Measured, raw: RawGraph, nodes: tuple[GradNode, ...], edges: tuple[GradEdge, ...]
) -> None:
    """`measured=False` on the op nodes and edges the scope left out (and nothing else
    measured: an edge that carries a leaf's gradient, a node whose inflow is its only
    consumer's edge). The objects are this run's own, not yet in any graph."""
    for n, raw_node in zip(nodes, raw.nodes.values(), strict=True):
        if n.kind == "op" and not raw_node.inflow and not scope.node(n.id):
            object.__setattr__(n, "measured", False)
            object.__setattr__(n, "status", UNMEASURED)
    for e, raw_edge in zip(edges, raw.edges, strict=True):
        if e.grad_norm is None and raw_edge.slot is None and raw_edge.leaf is None:
            into_leaf = e.dst.startswith(ids.ACC) or e.dst == ids.OUTPUT  # read from the leaf
            if not into_leaf and not scope.edge(e.src, e.dst):
                object.__setattr__(e, "measured", False)
                object.__setattr__(e, "status", UNMEASURED)


def _note_forward(state: RunState, nodes: tuple[GradNode, ...]) -> None:
    """A loss that is NaN/Inf sends a finite 1.0 back, so the gradients may all be healthy:
    the output node says the loss's value, and the op whose output first held NaN/Inf
    (run/forward_nan.py) says so (`GradNode.forward_note`). The nodes are this run's own."""
    loss = float(state.values[state.loss_slot])
    if math.isfinite(loss):
        return
    for n in nodes:
        if n.id == ids.OUTPUT:
            object.__setattr__(n, "forward_note", f"loss = {loss}")
        elif n.id == state.nonfinite_at:
            object.__setattr__(n, "forward_note", FORWARD_ORIGIN)


def _partials(state: RunState, thresholds: Thresholds) -> tuple[PartialFlow, ...]:
    """The partial sums the run measured (trace/partials.py), with their statuses."""
    if not state.partials:
        return ()
    found = state.partials.norms(state.values)
    norms = [norm for _, norm in found]
    statuses = classify_lists(norms, [flow_max(n) for n in norms], thresholds)
    return tuple(
        PartialFlow(part.src, part.dsts, norm, status)
        for (part, norm), status in zip(found, statuses, strict=True)
    )


def _node_pairs(
    raws: list[RawNode], values: list[float], leaf_by_id: Mapping[str, Pair | None]
) -> tuple[list[float | None], list[float | None]]:
    """Each node's (norm, max |g|), as two lists (what `classify_lists` takes)."""
    norms: list[float | None] = []
    maxes: list[float | None] = []
    for n in raws:
        kind = n.kind
        if kind != "op" and (kind in ids.LEAF_KINDS or kind == "accumulate"):
            leaf = n.id if kind != "accumulate" else ids.acc_leaf(n.id)
            norm, gmax = leaf_by_id.get(leaf) or (None, None)
        elif kind == "output":
            norm, gmax = 1.0, 1.0  # d loss / d loss
        else:  # an op: what flowed into it
            slots = n.inflow
            if len(slots) == 1:  # the common case: no combining
                norm = values[slots[0]]
            else:
                norm = combine_norms([values[s] for s in slots]) if slots else None
            gmax = flow_max(norm)
        norms.append(norm)
        maxes.append(gmax)
    return norms, maxes


def _edges(state: RunState, raw: RawGraph, thresholds: Thresholds) -> tuple[GradEdge, ...]:
    """Every edge with the norm of what flowed along it and its status."""
    values, leaf_by_id = state.values, state.leaf_pairs
    norms = [_edge_norm(e, raw, values, leaf_by_id) for e in raw.edges]
    maxes = [flow_max(norm) for norm in norms]
    statuses = classify_lists(norms, maxes, thresholds)
    make = maker(GradEdge, 5)
    return tuple(
        make(e.src, e.dst, norm, gmax, status)
        for e, norm, gmax, status in zip(raw.edges, norms, maxes, statuses, strict=True)
    )


def _edge_norm(
    e: RawEdge, raw: RawGraph, values: list[float], leaf_by_id: Mapping[str, Pair | None]
) -> float | None:
    """The norm of what flowed along one edge."""
    if e.slot is not None:
        return values[e.slot]
    if e.leaf is not None:  # a leaf's only edge: the leaf's gradient, measured once
        return (leaf_by_id.get(e.leaf) or (None, None))[0]
    if e.dst.startswith(ids.ACC) or e.dst == ids.OUTPUT:
        leaf = raw.nodes[e.src].kind != "op"
        return (leaf_by_id.get(e.src) or (None, None))[0] if leaf else 1.0
    return None


def _label(n) -> str:
    if n.kind in ("param", "input", "tensor"):
        name = ids.parse_leaf_id(n.id)[1]
        return f"{name}\n{tuple(n.shape)}"
    if n.kind == "output":
        return f"loss\n{tuple(n.shape)}"
    return n.op


def _module_tree(index: ModelIndex, calls: Mapping[str, int]) -> dict[str, ModuleScope]:
    tree: dict[str, ModuleScope] = {}
    canonical = index.canonical
    make = maker(ModuleScope, 6)
    for path, module in index.modules:
        prefix = f"{path}." if path else ""
        children = tuple(_distinct_names(module._modules, prefix))
        # a tied parameter is listed under the name the report uses for it
        params = tuple([canonical.get(q, q) for q in _distinct_names(module._parameters, prefix)])
        parent = None if path == "" else ids.owner_path(path)
        tree[path] = make(
            path,
            type(module).__name__,
            calls.get(path, 1 if path == "" else 0),
            parent,
            children,
            params,
        )
    tree[ids.LOSS_SCOPE] = ModuleScope(ids.LOSS_SCOPE, "Loss", 1, "", (), ())
    return tree


def _distinct_names(members: Mapping[str, object], prefix: str = "") -> list[str]:
    """Names of the non-None members, each object once (`named_children()`,
    `named_parameters(recurse=False)`), after `prefix`, without a generator per module."""
    if not members:
        return []
    seen: set[int] = set()
    return [
        prefix + k
        for k, v in members.items()
        if v is not None and id(v) not in seen and not seen.add(id(v))  # type: ignore[func-returns-value]
    ]


def module_norms(
    model: nn.Module, norms: Mapping[str, float | None], index: ModelIndex | None = None
) -> dict[str, float | None]:
    """path -> combined norm of every distinct parameter the module holds under any name (a tied
    weight counts in each module holding it, once per module)."""
    index = index or ModelIndex.of(model)
    held: dict[str, set[str]] = {path: set() for path, _ in index.modules}
    owned: dict[str, set[str]] = {}  # module path -> the parameters it holds directly
    for alias, name in index.canonical.items():
        owned.setdefault(ids.owner_path(alias), set()).add(name)
    for owner, names in owned.items():
        for path in ["", *ids.path_prefixes(owner)]:
            if path in held:
                held[path].update(names)
    # combine_norms is exact in any order (fsum of the scaled squares): the sets need no sorting
    return {path: combine_norms([norms.get(n) for n in names]) for path, names in held.items()}


def build_report(state: RunState, graph: GradGraph) -> GradReport:
    """The report; the run's own `findings` follow diagnose's."""
    records = _param_records(state, graph)
    inputs = {ids.parse_leaf_id(n.id)[1]: n.grad_norm for n in graph.nodes if n.kind == "input"}
    loss_value = float(state.values[state.loss_slot])
    nan_at = state.nonfinite_at or diagnose.nonfinite_origin(graph, loss_value)
    return GradReport(
        loss=loss_value,
        loss_description=_described(state),
        params=tuple(records),
        module_norms=module_norms(state.model, {r.name: r.norm for r in records}, state.index),
        thresholds=state.settings.thresholds,
        device=str(state.device),
        duration_s=0.0,
        nonfinite_origin=nan_at,
        findings=(*diagnose.findings(records, nan_at, loss_value, graph), *state.findings),
        input_norms=inputs,
        host_syncs=state.batch.syncs,
        notes=tuple(state.notes),
    )


def _param_records(state: RunState, graph: GradGraph) -> list[ParamRecord]:
    """One record per parameter, with its status, why it got no gradient and any zero origin."""
    params = state.stand_ins.params
    leaf_ids = [ids.param_id(name) for name in params]
    pairs = [state.leaf_pairs.get(leaf_id) for leaf_id in leaf_ids]
    norms = [pair[0] if pair else None for pair in pairs]
    maxes = [pair[1] if pair else None for pair in pairs]
    statuses = classify_lists(norms, maxes, state.settings.thresholds)
    origins = diagnose.zero_origins(graph) if "zero" in statuses else {}
    fractions = state.zero_fractions
    dtypes: dict[object, str] = {}
    make = maker(ParamRecord, 13)
    records = []
    for (name, p), leaf_id, pair, status in zip(params.items(), leaf_ids, pairs, statuses):
        dtype = p.dtype
        text = dtypes.get(dtype) or dtypes.setdefault(dtype, str(dtype).replace("torch.", ""))
        records.append(
            make(
                name,
                ids.owner_path(name),
                tuple(p.shape),
                text,
                p.requires_grad,
                pair[0] if pair else None,
                pair[1] if pair else None,
                status,
                None if pair else _none_reason(state, graph, name, p.requires_grad),
                origins.get(leaf_id) if status == "zero" else None,
                None,  # modified_by and norm_before: set by mark_modified when a hook changes it
                None,
                fractions.get(leaf_id),
            )
        )
    return records


def _described(state: RunState) -> str:
    """How the loss came about, and the autocast it ran under when the run had one."""
    dtype = state.settings.autocast
    return state.how if dtype is None else f"{state.how}, under autocast({str(dtype)[6:]})"


def _none_reason(state: RunState, graph: GradGraph, name: str, requires_grad: bool) -> str | None:
    """Why parameter `name` got no gradient. When a reentrant checkpoint got no input requiring
    grad, a module that ran only without grad and inside a reentrant checkpoint was cut off by
    it (one in a plain `torch.no_grad()` block is told so); one the graph reaches was given
    None by an op (`diagnose.refused_by`)."""
    refused = diagnose.refused_by(graph, ids.param_id(name)) if requires_grad else None
    if refused:
        return refused
    tracker = state.tracker
    reason = diagnose.none_reason(name, requires_grad, tracker.calls, tracker.grad_enabled)
    if reason and state.cut_off and requires_grad:
        path = ids.owner_path(name)
        flags = tracker.grad_enabled.get(path, [])
        if flags and not any(flags) and path in tracker.in_checkpoint:
            reason = CHECKPOINT_NO_GRAD
    return reason
