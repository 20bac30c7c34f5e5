"""What the search box can find: every module and parameter of the model, drawn or folded away.

`search_index` lists each module path and parameter name with the node of the drawn view that
shows it (itself, or the folded module / ×N group holding it), so a search for `c_attn` finds
the eight c_attn parameters of a GPT-2 folded into one "h.0–3 ×4" node. `unfold_to` says
which modules (and groups) to unfold so that a name gets a node of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from ..ids import ghost_id, is_group_id, param_id
from .grad_graph import GradGraph

#: an index entry: (name, "module" | "param", id of the drawn node showing it, "folded" when
#: that node is a folded module or group holding it, else "")
Entry = tuple[str, str, str, str]


def _owners(graph: GradGraph) -> dict[str, str]:
    """module path -> the first node of `graph` inside it (params and ghosts included)."""
    owner: dict[str, str] = {}
    for n in graph.nodes:
        for path, _ in n.scope:
            owner.setdefault(path, n.id)
        if n.module:
            owner.setdefault(n.module, n.id)
    return owner


def _showing(view: GradGraph) -> dict[str, str]:
    """node id of the unfolded graph -> the node of `view` drawing it."""
    out = {n.id: n.id for n in view.nodes}
    for n in view.nodes:
        for m in n.members:
            out.setdefault(m, n.id)
    return out


def targets(graph: GradGraph, name: str) -> list[str]:
    """Ids of `graph`'s nodes standing for module or parameter `name`."""
    leaf = param_id(name)
    found = [i for i in (leaf, ghost_id(leaf)) if i in graph]
    if found:
        return found
    owner = _owners(graph).get(name)
    return [owner] if owner else []


def search_index(graph: GradGraph, view: GradGraph) -> list[Entry]:
    """Every module path and parameter name of `graph`'s model with the `view` node showing it
    ("" when none does).

    Example:
        >>> search_index(graph, graph.view(0))[:1]          # doctest: +SKIP
        [('transformer', 'module', 'module:transformer', '')]
    """
    showing = _showing(view)
    owner = _owners(graph)
    out: list[Entry] = []
    for path, info in graph.modules.items():
        if path and path in owner:
            shown = showing.get(owner[path], "")
            node = view.by_id.get(shown)
            own = node is not None and (node.module == path or node.module.startswith(path + "."))
            out.append((path, "module", shown, "" if own or not shown else "folded"))
        for name in info.params:
            ids = [i for i in (param_id(name), ghost_id(param_id(name))) if i in graph]
            shown = showing.get(ids[0], "") if ids else ""
            out.append((name, "param", shown, "" if shown in ids or not shown else "folded"))
    return out


def unfold_to(
    graph: GradGraph,
    name: str,
    expand: Collection[str],
    view_of: Callable[[frozenset[str]], GradGraph],
    limit: int = 16,
) -> frozenset[str]:
    """`expand` plus the folded modules and ×N groups to open until `name` (a module path or a
    parameter name) is drawn as its own node or cluster; `view_of(expand)` folds the graph as
    the widget does."""
    wanted = set(targets(graph, name))
    opened = frozenset(expand)
    for _ in range(limit):
        view = view_of(opened)
        showing = _showing(view)
        holders = sorted({showing[t] for t in wanted if t in showing})
        node = view.node(holders[0]) if holders else None
        if node is None or node.id in wanted or node.kind != "module":
            return opened
        if node.module == name and not is_group_id(node.id):
            return opened  # a module's own folded box is its node
        opened = opened | {node.id if is_group_id(node.id) else node.module}
    return opened
