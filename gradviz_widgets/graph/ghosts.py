"""Ghost nodes: the parameters the gradient never reached, drawn where they live.

The chart lists a frozen / detached / no_grad / never-called parameter; the picture showed
nothing. `add_ghosts` returns the graph with one `kind="ghost"` node per such parameter, in its
module's cluster, labelled with the cut ("✂ frozen"). Ghosts have no edges and no norm, so
every norm, status and fold of the real graph is unchanged; ids are `ghost:param:<name>`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ..ids import GHOST as GHOST_PREFIX
from ..ids import Scope, ghost_id, is_ghost, owner_path, param_id, path_prefixes
from .grad_graph import GradGraph
from .nodes import GradNode
from .scopes import aligned_scope, call_prefixes

#: words of a none reason (diagnose.none_reason) -> the cut shown on the ghost
_CUTS = (
    ("frozen", "frozen"),
    ("no_grad", "no_grad"),
    ("never called", "never called"),
    ("detached", "detached"),
)


def cut_of(reason: str | None, name: str = "") -> str:
    """The short cut name for a None reason ("frozen", "detached", "no_grad", "never called")
    of parameter `name`: read from the reason's own words, not from the module name it quotes
    (a module called `unfrozen` that ran under no_grad is cut by no_grad).

    Example:
        >>> cut_of("requires_grad=False (frozen): autograd does not track it")
        'frozen'
        >>> cut_of("not reached from the loss: module 'unfrozen' ran under torch.no_grad()",
        ...        "unfrozen.weight")
        'no_grad'
    """
    text = reason or ""
    if name:
        text = text.replace(f"module '{owner_path(name)}'", "")
    text = text.lower()
    for word, cut in _CUTS:
        if word in text:
            return cut
    return "no gradient"


def add_ghosts(graph: GradGraph, none_reasons: Mapping[str, str] | None = None) -> GradGraph:
    """`graph` plus a ghost node for every parameter of its module tree with no node in it.

    `none_reasons` (GradReport.none_reasons) names each cut; without it, parameters of modules
    never called read "never called" and the rest "no gradient".
    """
    reasons = dict(none_reasons or {})
    prefixes = call_prefixes(graph.nodes)
    ghosts = []
    for name, path in _owners(graph).items():
        gid = ghost_id(param_id(name))
        if param_id(name) in graph or gid in graph:
            continue
        reason = reasons.get(name) or (
            "never called" if graph.modules[path].calls == 0 else "no gradient reached it"
        )
        ghosts.append(_ghost(gid, name, path, reason, _scope(path, graph, prefixes)))
    if not ghosts:
        return graph
    return dataclasses.replace(graph, nodes=graph.nodes + tuple(ghosts))


def _owners(graph: GradGraph) -> dict[str, str]:
    """Each parameter's one module: a tied weight is listed by every module that holds it (GPT-2's
    `lm_head` lists `transformer.wte.weight`), and gets one ghost, where its name says it lives."""
    owners: dict[str, str] = {}
    for path, info in graph.modules.items():
        for name in info.params:
            if name not in owners or path == owner_path(name):
                owners[name] = path
    return owners


def _scope(path: str, graph: GradGraph, prefixes: Mapping[str, Scope]) -> Scope:
    chain = tuple(
        (p, -1 if (m := graph.modules.get(p)) and m.calls > 1 else 0) for p in path_prefixes(path)
    )
    scope = aligned_scope(chain, prefixes, graph.modules)
    if path and (not scope or scope[-1][0] != path):
        scope = (*scope, (path, 0))  # its own cluster, even when the module never ran
    return scope


def _ghost(gid: str, name: str, module: str, reason: str, scope: Scope) -> GradNode:
    cut = cut_of(reason, name)
    return GradNode(
        id=gid,
        op="Ghost",
        kind="ghost",
        module=module,
        label=f"{name}\n✂ {cut}",
        scope=scope,
        status="none",
    )


__all__ = ["GHOST_PREFIX", "add_ghosts", "cut_of", "is_ghost"]
