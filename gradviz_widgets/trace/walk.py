"""Walk the autograd graph from the loss (iteratively: no recursion limit) and give every node a
stable id; optionally hook every node so the gradient that flows through it is measured.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Protocol

import torch

from ..ids import (
    LOSS_CALL,
    LOSS_SCOPE,
    OUTPUT,
    Scope,
    acc_id,
    acc_leaf,
    leaf_id,
    module_of_scope,
    op_id,
    owner_path,
    path_prefixes,
)
from ..stats.norms import NormBatch
from .partials import PartialSums, Piece

#: key in `grad_fn.metadata` marking autograd nodes our hooks add (set by hooks/run.py)
HOOK_NODE_MARK = "gradviz_widgets"
#: the autograd node of `F.embedding`, whose weight gradient is zero outside the looked-up rows
EMBEDDING_BACKWARD = "EmbeddingBackward0"
#: backward nodes of views: what they pass on holds exactly the elements they received
VIEW_BACKWARDS = frozenset(
    {
        "TBackward0",
        "TransposeBackward0",
        "PermuteBackward0",
        "ViewBackward0",
        "UnsafeViewBackward0",
        "AliasBackward0",
        "SqueezeBackward0",
        "SqueezeBackward1",
        "UnsqueezeBackward0",
    }
)


@dataclasses.dataclass
class RawNode:
    """A node while the run is in flight; holds the autograd object until `release()`."""

    id: str
    op: str
    kind: str
    module: str
    scope: Scope
    fn: Any = None  # the autograd Node, or None for leaves / the output
    tensor: torch.Tensor | None = None  # the leaf tensor, for leaves
    shape: tuple[int, ...] | None = None
    inflow: list[int] = dataclasses.field(default_factory=list)  # NormBatch slots of grad_outputs
    order: int | None = None


@dataclasses.dataclass
class RawEdge:
    src: str
    dst: str
    slot: int | None = None  # NormBatch slot of the gradient that flowed dst -> src
    index: int | None = None  # position in the consumer's next_functions
    #: (hook node, its input) of each hook node the gradient passed through, consumer side first
    via: tuple[tuple[Any, int], ...] = ()
    leaf: str | None = None  # the leaf whose whole gradient this edge carried (not measured twice)
    out_nr: int = 0  # which output of the producer it feeds


@dataclasses.dataclass
class RawGraph:
    nodes: dict[str, RawNode]
    edges: list[RawEdge]
    leaves: list[RawNode]  # leaf tensors that require grad, in walk order

    def release(self) -> None:
        """Forget autograd objects and tensors so no activation outlives the run.

        Loss side first: a node's Python reference is dropped only after all its consumers'
        are, so each release frees at most that node (its producers are still referenced).
        Dropping them leaf side first leaves the whole chain to be freed by the last release,
        which recurses in C and overflows the stack on long graphs (an RNN cell unrolled
        ~12,000 steps, a 20,000-op chain).
        """
        for e in self.edges:
            e.via = ()  # hook nodes stay alive through their consumers until those go
        for node_id in self.release_order():
            n = self.nodes[node_id]
            n.fn = None
            n.tensor = None

    def release_order(self) -> list[str]:
        """Node ids, every consumer before its producers (reverse topological, loss first)."""
        consumers = Counter(e.src for e in self.edges)
        producers: dict[str, list[str]] = {}
        for e in self.edges:
            producers.setdefault(e.dst, []).append(e.src)
        ready = [i for i in reversed(self.nodes) if consumers[i] == 0]
        order: list[str] = []
        while ready:
            node_id = ready.pop()
            order.append(node_id)
            for src in producers.get(node_id, ()):
                consumers[src] -= 1
                if consumers[src] == 0:
                    ready.append(src)
        seen = set(order)  # a malformed graph must still be released in full
        return order + [i for i in self.nodes if i not in seen]


def leaf_names(
    params: Mapping[str, torch.Tensor], inputs: list[tuple[str, torch.Tensor]]
) -> dict[int, tuple[str, str]]:
    """id(tensor) -> (kind, name) for the parameters and inputs of this run."""
    names: dict[int, tuple[str, str]] = {}
    for name, t in inputs:
        names[id(t)] = ("input", name)
    for name, t in params.items():
        names[id(t)] = ("param", name)
    return names


def param_scope(name: str, calls: Mapping[str, int]) -> Scope:
    """The module chain owning parameter `name`; -1 marks modules called several times."""
    return tuple((p, -1 if calls.get(p, 0) > 1 else 0) for p in path_prefixes(owner_path(name)))


def walk(
    loss: torch.Tensor,
    owner: Mapping[Any, Scope],
    names: Mapping[int, tuple[str, str]],
    calls: Mapping[str, int],
) -> RawGraph:
    """Every autograd node reachable from `loss.grad_fn`, leaves that require grad, and the output.

    Ids (ids.py): `module.path/OpName#k` (k counts that op within that module, in creation
    order), `param:<qualified name>`, `input:<arg>`, `acc:<leaf id>` for AccumulateGrad,
    `output` for the loss.
    """
    found = _reachable(loss.grad_fn)
    # nodes our own hooks add are left out, so the graph (and its ids) is the same with
    # hooks on or off; edges run through them to what they wrap
    transparent = {fn for fn in found if _is_hook_node(fn)}
    # creation order (the order ops claimed their nodes) makes ids stable across runs; nodes
    # no op claimed follow, in walk order
    ordered = [fn for fn in owner if fn in found and fn not in transparent]
    if len(ordered) < len(found) - len(transparent):  # some node no op claimed
        ordered += [fn for fn in found if fn not in owner and fn not in transparent]
    nodes, by_fn, leaves = _name_nodes(ordered, owner, names, calls)
    edges = _edges(by_fn, found, transparent)
    out = RawNode(OUTPUT, "Output", "output", LOSS_SCOPE, LOSS_CALL, shape=tuple(loss.shape))
    nodes[OUTPUT] = out
    last = loss.grad_fn
    while last in transparent:
        last = last.next_functions[0][0]  # type: ignore[union-attr]
    edges.append(RawEdge(by_fn[last].id, OUTPUT))
    return RawGraph(nodes, edges, leaves)


def _reachable(root: Any) -> dict[Any, tuple]:
    """Autograd nodes reachable from `root`, in depth-first order (no recursion), each with its
    `next_functions` (read once: each read builds the tuple anew)."""
    found: dict[Any, tuple] = {}
    todo = [root]
    while todo:
        fn = todo.pop()
        if fn in found:
            continue
        found[fn] = nexts = fn.next_functions
        # what is found already would be skipped when popped: the order is the same
        todo += [nxt for nxt, _ in reversed(nexts) if nxt is not None and nxt not in found]
    return found


def _name_nodes(
    ordered: list[Any],
    owner: Mapping[Any, Scope],
    names: Mapping[int, tuple[str, str]],
    calls: Mapping[str, int],
) -> tuple[dict[str, RawNode], dict[Any, RawNode], list[RawNode]]:
    """Nodes with their ids, in creation order: (id -> node, autograd node -> node, leaves)."""
    nodes: dict[str, RawNode] = {}
    by_fn: dict[Any, RawNode] = {}
    leaves: list[RawNode] = []
    counts: dict[tuple[str, str], int] = {}  # ops per (module, op)
    others = 0  # leaves that are neither parameters nor inputs
    scopes: dict[str, Scope] = {}  # owner path -> its parameters' scope
    for fn in ordered:
        op = type(fn).__name__
        # only AccumulateGrad has `variable` (a getattr that misses costs an exception)
        var = fn.variable if op == "AccumulateGrad" else None
        if var is not None:
            kind, name = names.get(id(var), ("tensor", ""))
            if kind == "tensor":
                name, others = str(others), others + 1
            if kind == "param":
                path = owner_path(name)
                scope = scopes.get(path)
                if scope is None:
                    scope = scopes[path] = param_scope(name, calls)
            elif kind == "input":
                # the root's, not the first call that read it (which made its AccumulateGrad):
                # folded into that call, it had hidden the input and its other readers' edges
                scope = ()
            else:
                scope = owner.get(fn, ())
            # inputs belong to the root; parameters and other leaves to their innermost module
            module = module_of_scope(scope)
            leaf = RawNode(leaf_id(kind, name), kind.capitalize(), kind, module, scope)
            leaf.tensor, leaf.shape = var, tuple(var.shape)
            nodes[leaf.id] = leaf
            leaves.append(leaf)
            node = RawNode(acc_id(leaf.id), op, "accumulate", module, scope, fn=fn)
        else:
            scope = owner.get(fn, LOSS_CALL)
            module = module_of_scope(scope)
            k = counts.get((module, op), 0)
            counts[(module, op)] = k + 1
            node = RawNode(op_id(module, op, k), op, "op", module, scope, fn=fn)
        nodes[node.id] = node
        by_fn[fn] = node
    return nodes, by_fn, leaves


def _edges(
    by_fn: Mapping[Any, RawNode], nexts: Mapping[Any, tuple], transparent: Collection[Any]
) -> list[RawEdge]:
    """Producer -> consumer edges, through the hook nodes in `transparent`; `nexts`: each
    node's `next_functions` (`_reachable`)."""
    edges: list[RawEdge] = []
    for fn, node in by_fn.items():
        if node.kind == "accumulate":
            edges.append(RawEdge(acc_leaf(node.id), node.id))
        for index, (nxt, out_nr) in enumerate(nexts[fn]):
            if nxt is None:
                continue
            if nxt not in transparent:
                edges.append(RawEdge(by_fn[nxt].id, node.id, index=index, out_nr=out_nr))
                continue
            via = []
            while nxt in transparent:  # identity: its output k comes from its input k
                via.append((nxt, out_nr))
                nxt, out_nr = nexts[nxt][out_nr]
            if nxt is not None:
                edges.append(
                    RawEdge(by_fn[nxt].id, node.id, index=index, via=tuple(via), out_nr=out_nr)
                )
    return edges


def _is_hook_node(fn: Any) -> bool:
    """Autograd nodes that module hooks insert (identity functions), not the model's ops."""
    if type(fn).__name__ == "BackwardHookFunctionBackward":
        return True
    metadata = getattr(fn, "metadata", None)
    return bool(metadata) and HOOK_NODE_MARK in metadata  # type: ignore[operator]


@dataclasses.dataclass(frozen=True)
class FlowFacts:
    """What `instrument` needs to know of the run beyond its graph."""

    #: ids of nodes whose incoming gradient a modifier changes
    modified: Collection[str] = ()
    #: no reentrant checkpoint adds to a leaf's gradient during backward
    leaves_whole: bool = True
    #: ids of nodes whose output the model hooked in forward (`ScopeTracker.hooked`): what
    #: enters them is measured there, not taken from their consumer's edge
    hooked: Collection[str] = ()
    #: EmbeddingBackward0 node -> the indices its lookup took (`ScopeTracker.lookups`)
    lookups: Mapping[Any, torch.Tensor] = dataclasses.field(default_factory=dict)
    #: which edges and op nodes to measure (graph/measure.FlowScope); None: all of them
    scope: Measured | None = None


class Measured(Protocol):
    """What a run measures: graph/measure.FlowScope (trace/ does not import graph/)."""

    def edge(self, src: str, dst: str) -> bool: ...

    def node(self, node_id: str) -> bool: ...


def instrument(graph: RawGraph, batch: NormBatch, facts: FlowFacts | None = None) -> PartialSums:
    """Hook every op node so the norms of its incoming and outgoing gradients are measured (no
    host sync; max |g| is not read along edges: the norm is what the graph shows).

    A node whose output feeds exactly one consumer received exactly what that consumer sent
    along their edge, so its inflow reuses the edge's number instead of measuring the same
    tensor twice, unless a modifier on the node (`facts.modified`) or a tensor hook the model
    put on its output in forward (`facts.hooked`) changes it in between.
    Likewise an edge from a leaf's AccumulateGrad to its only consumer carries that leaf's
    whole gradient, which the run reads back anyway: with `facts.leaves_whole` and no
    modifier, it is marked `leaf` and takes the leaf's number.
    A large leaf's gradient is measured in full where it is made, while in cache, for its
    arrival at the leaf (trace/arrivals.py) or the read-back to find by identity: on that
    edge, or on its way into a view of the leaf (a Linear weight's `t()`). An embedding's
    weight gradient is read from the rows its lookup took (`facts.lookups`).
    The pieces one module call's (or container's: a ModuleList of blocks) consumers send a
    producer read elsewhere too are added up as they arrive (the `PartialSums` returned). With
    `facts.scope` only the edges and nodes one view needs are measured (graph/measure.py). The
    hooks vanish with this run's graph.
    """
    facts = facts or FlowFacts()
    modified, leaves_whole = facts.modified, facts.leaves_whole
    leaving, in_edges, sharing = _edge_maps(graph)
    carried = _carried(graph, leaving) if leaves_whole and not modified else {}
    large = _measured_alone(graph, batch)
    whole = _into_views_of_leaves(graph, large, carried, leaving, in_edges)
    viewed = set(whole.values())  # their leaves' gradients are measured on the way in
    order = itertools.count()
    through: dict[Any, list[tuple[RawEdge, int]]] = {}
    planned: list[tuple[RawNode, list[RawEdge], list[RawEdge]]] = []
    for node in graph.nodes.values():
        if node.kind != "op":
            continue
        direct, wholes = [], []
        for e in in_edges.get(node.id, []):
            if id(e) in carried:
                e.leaf = carried[id(e)]
                if e.leaf in large and node.id not in viewed:
                    wholes.append(e)  # the leaf's gradient itself: measured here, in cache
            elif e.via and (at := _deepest_unshared(e, sharing)) is not None:
                through.setdefault(at[0], []).append((e, at[1]))
            else:
                direct.append(e)
        if whole:
            wholes += [e for e in direct if id(e) in whole]
        planned.append((node, direct, wholes))
    partials = _plan_partials(graph, leaving, planned, batch)
    for node, direct, wholes in planned:
        flows = _node_flows(node, direct, wholes, leaving.get(node.id, []), facts, viewed, partials)
        if flows is not None:
            node.fn.register_hook(_flow_hook(node, flows, batch, order, partials))
    _hook_the_hook_nodes(through, _plan_exits(graph, sharing, partials), batch, partials)
    return partials


def _node_flows(
    node: RawNode,
    direct: list[RawEdge],
    wholes: list[RawEdge],
    out: list[RawEdge],
    facts: FlowFacts,
    viewed: Collection[str],
    partials: PartialSums,
) -> _Flows | None:
    """What one op node's hook measures (`_Flows`); None when nothing (a node a view folds
    away, with no leaf, rows or partial sum to see)."""
    scope = facts.scope
    measured = scope is None or scope.node(node.id)
    if scope is not None:  # a partial sum takes its pieces whatever the view
        direct = [e for e in direct if scope.edge(e.src, e.dst) or partials.wants(id(e))]
    alone = len(out) == 1 and out[0].dst != OUTPUT
    mine = node.id not in facts.modified and node.id not in facts.hooked
    same = out[0] if alone and mine else None
    rows = facts.lookups.get(node.fn) if node.op == EMBEDDING_BACKWARD else None
    # a hooked view of a leaf (`w = weight.t(); w.register_hook(...)`): what enters it is
    # the leaf's gradient to be, measured in full here for its arrival to find
    whole_in = node.id in viewed and node.id in facts.hooked
    if not (measured or direct or wholes or rows is not None or whole_in):
        return None
    pieces = [(k, id(e)) for k, e in enumerate(direct) if partials.wants(id(e))]
    return _Flows(direct, same, rows, wholes, whole_in, pieces, measured)


def _hook_the_hook_nodes(
    through: Mapping[Any, list[tuple[RawEdge, int]]],
    exits: Mapping[Any, list[tuple[int, int]]],
    batch: NormBatch,
    partials: PartialSums,
) -> None:
    """Hooks on the hook nodes: the edges each carries alone (`through`) and the sums that
    leave it for several edges (`exits`, `_plan_exits`)."""
    for hook_fn, edges in through.items():
        hook_fn.register_hook(_through_hook(edges, batch))
    for hook_fn, sums in exits.items():
        hook_fn.register_hook(_exit_hook(sums, partials))


def _plan_partials(
    graph: RawGraph,
    leaving: Mapping[str, list[RawEdge]],
    planned: list[tuple[RawNode, list[RawEdge], list[RawEdge]]],
    batch: NormBatch,
) -> PartialSums:
    """The partial sums worth keeping: producers with three or more consumer edges."""
    shared = {src: es for src, es in leaving.items() if len(es) > 2}
    if not shared:
        return PartialSums.plan((), batch)
    seen = {id(e) for _, direct, _ in planned for e in direct}
    nodes = graph.nodes
    pieces = [
        Piece(id(e), src, e.dst, e.out_nr, nodes[e.dst].scope, id(e) in seen)
        for src, es in shared.items()
        for e in es
        if e.dst != OUTPUT
    ]
    made_in = {src: nodes[src].scope for src in shared if nodes[src].kind == "op"}
    return PartialSums.plan(pieces, batch, made_in)


def _edge_maps(
    graph: RawGraph,
) -> tuple[dict[str, list[RawEdge]], dict[str, list[RawEdge]], Counter[tuple[int, int]]]:
    """Edges by producer and by consumer, and how many edges pass through each hook node's
    input: an edge through a hook node takes what left the hook node (after any modifier)
    when it is that input's only consumer; shared inputs keep each consumer's own part."""
    leaving: dict[str, list[RawEdge]] = {}
    in_edges: dict[str, list[RawEdge]] = {}
    sharing: Counter[tuple[int, int]] = Counter()
    for e in graph.edges:
        leaving.setdefault(e.src, []).append(e)
        in_edges.setdefault(e.dst, []).append(e)
        for hook_fn, k in e.via:
            sharing[(id(hook_fn), k)] += 1
    return leaving, in_edges, sharing


def _measured_alone(graph: RawGraph, batch: NormBatch) -> dict[str, RawNode]:
    """The leaves whose gradients are measured on their own (`NormBatch.alone`; small ones
    share the pending buffer), by id."""
    return {
        leaf.id: leaf
        for leaf in graph.leaves
        if leaf.tensor is not None and batch.alone(leaf.tensor)
    }


def _carried(graph: RawGraph, leaving: Mapping[str, list[RawEdge]]) -> dict[int, str]:
    """id(edge) -> leaf id for each edge that is a leaf's only way in: from its AccumulateGrad
    to its one consumer, the leaf met once in the graph and its tensor without hooks (so what
    the edge carries is exactly the gradient autograd.grad returns for it)."""
    seen = Counter(leaf.id for leaf in graph.leaves)
    out: dict[int, str] = {}
    for leaf in graph.leaves:
        t = leaf.tensor
        if seen[leaf.id] != 1 or t is None or t._backward_hooks:
            continue
        edges = leaving.get(acc_id(leaf.id), ())
        if len(edges) == 1 and not edges[0].via:
            out[id(edges[0])] = leaf.id
    return out


def _into_views_of_leaves(
    graph: RawGraph,
    large: Collection[str],
    carried: Mapping[int, str],
    leaving: Mapping[str, list[RawEdge]],
    in_edges: Mapping[str, list[RawEdge]],
) -> dict[int, str]:
    """id(edge) -> the view node it feeds, for each edge into a view node (`t()` of a Linear
    weight) whose only input is a `large` leaf it carries whole: what flows along the edge is
    that leaf's gradient, rearranged."""
    out: dict[int, str] = {}
    for leaf in large:
        edges = leaving.get(acc_id(leaf), ())
        if len(edges) != 1 or id(edges[0]) not in carried:
            continue
        view = graph.nodes[edges[0].dst]
        outs = leaving.get(view.id, ())
        alone = view.op in VIEW_BACKWARDS and len(in_edges.get(view.id, ())) == 1
        if alone and len(outs) == 1 and not outs[0].via and outs[0].dst != OUTPUT:
            out[id(outs[0])] = view.id
    return out


@dataclasses.dataclass(frozen=True)
class _Flows:
    """What one op node's hook measures: its direct in-edges, the edge whose number its
    inflow reuses, an embedding's looked-up rows, the leaves' gradients it sees whole, and
    (position among `direct`, edge key) of the pieces partial sums take."""

    direct: list[RawEdge]
    same: RawEdge | None
    rows: torch.Tensor | None
    wholes: list[RawEdge]
    whole_in: bool
    pieces: list[tuple[int, int]]
    measured: bool = True  # what arrives is measured (not for a node a view folds away)


def _flow_hook(
    node: RawNode, flows: _Flows, batch: NormBatch, order: Iterator[int], partials: PartialSums
):
    edges, same, rows = flows.direct, flows.same, flows.rows
    whole_in, pieces, measured = flows.whole_in, flows.pieces, flows.measured
    indices = [e.index for e in edges]
    whole_at = [e.index for e in flows.wholes if e.index is not None]

    def hook(grad_inputs: tuple, grad_outputs: tuple) -> None:
        node.order = next(order)
        if rows is not None:
            _note_rows(grad_inputs, rows, batch)
        if whole_at:  # a parameter's gradient (to be): measured in full while in cache
            batch.add_whole([g for i in whole_at if (g := grad_inputs[i]) is not None])
        # one `add` per node: what arrived (unless the consumer's edge measured it) and what
        # leaves along each edge
        reuse = same is not None and same.slot is not None and len(grad_outputs) == 1
        if reuse and not indices and not whole_in:  # a view's `t()` of a weight, say
            node.inflow = [same.slot]  # type: ignore[list-item, union-attr]
            return
        arrived = (
            []
            if reuse or not (measured or whole_in)
            else [g for g in grad_outputs if g is not None]
        )
        if whole_in:
            batch.add_whole(arrived)
        leaving = [grad_inputs[i] for i in indices]  # type: ignore[index]
        slots = batch.add(arrived + [g for g in leaving if g is not None], norms_only=True)
        node.inflow = [same.slot] if reuse else slots[: len(arrived)]  # type: ignore[list-item, union-attr]
        _note_slots(edges, leaving, slots, len(arrived))
        for k, key in pieces:
            partials.add(key, leaving[k])

    return hook


def _note_slots(edges: list[RawEdge], leaving: list, slots: list[int], k: int) -> None:
    """Each edge that carried a gradient gets its slot (in order, from `slots[k]` on)."""
    for e, g in zip(edges, leaving):
        if g is not None:
            e.slot = slots[k]
            k += 1


def note_lookups(batch: NormBatch, lookups: Mapping[Any, torch.Tensor]) -> None:
    """Without flow hooks (`track_flow=False`): still read each embedding's weight gradient from
    the rows its lookup took (`ScopeTracker.lookups`), one hook on each lookup's node, as
    `instrument` does along with the flow (GPT-2's 50,257 x 768 table is 38.6M elements read
    whole)."""
    for fn, rows in lookups.items():
        if type(fn).__name__ == EMBEDDING_BACKWARD:
            fn.register_hook(_rows_hook(rows, batch))


def _rows_hook(rows: torch.Tensor, batch: NormBatch):
    def hook(grad_inputs: tuple, grad_outputs: tuple) -> None:
        _note_rows(grad_inputs, rows, batch)

    return hook


def _note_rows(grad_inputs: tuple, rows: torch.Tensor, batch: NormBatch) -> None:
    """An embedding's weight gradient is zero outside the looked-up rows: measured from those
    (on its edge and when the leaf is read back), not from the whole vocabulary."""
    if grad_inputs and grad_inputs[0] is not None:
        batch.zero_outside(grad_inputs[0], rows)


def _deepest_unshared(e: RawEdge, sharing: Counter[tuple[int, int]]) -> tuple[Any, int] | None:
    """The hook node (and its input) nearest the producer whose input carries this edge's
    gradient alone: what it passes on is this edge's part after every hook on the way (a
    module's full backward hook inside an outer hooked module that also uses the input
    elsewhere: the outer hook node's input is shared, the inner one's is not). Sharing only
    grows toward the producer, so the last unshared one is it; None if the first is shared."""
    found = None
    for hook_fn, k in e.via:
        if sharing[(id(hook_fn), k)] != 1:
            break
        found = (hook_fn, k)
    return found


def _plan_exits(
    graph: RawGraph, sharing: Counter[tuple[int, int]], partials: PartialSums
) -> dict[Any, list[tuple[int, int]]]:
    """hook node -> (its input k, partial key) for each hook node input that several edges
    pass through (a hooked module reading its input in q and k): what leaves it is what the
    module passed back to that producer after its full backward hook (or a modifier), which
    the pieces its consumers sent, summed, are not."""
    shared: dict[tuple[int, int], tuple[Any, int, str, list[str]]] = {}
    for e in graph.edges:
        for hook_fn, k in e.via:
            if sharing[(id(hook_fn), k)] > 1:
                shared.setdefault((id(hook_fn), k), (hook_fn, k, e.src, []))[3].append(e.dst)
    exits: dict[Any, list[tuple[int, int]]] = {}
    for hook_fn, k, src, dsts in shared.values():
        key = partials.add_exit(src, tuple(sorted(dsts)))
        if key is None:
            break
        exits.setdefault(hook_fn, []).append((k, key))
    return exits


def _exit_hook(exits: list[tuple[int, int]], partials: PartialSums):
    def hook(grad_inputs: tuple, grad_outputs: tuple) -> None:
        for k, key in exits:
            partials.add(key, grad_inputs[k])

    return hook


def _through_hook(edges: list[tuple[RawEdge, int]], batch: NormBatch):
    def hook(grad_inputs: tuple, grad_outputs: tuple) -> None:
        present = [(e, g) for e, k in edges if (g := grad_inputs[k]) is not None]
        for (e, _), slot in zip(present, batch.add([g for _, g in present], norms_only=True)):
            e.slot = slot

    return hook
