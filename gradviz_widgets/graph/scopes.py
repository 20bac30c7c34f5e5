"""Parameters placed in the module call that used them, so each module is drawn once.

A parameter's scope comes from its qualified name (`h.0.attn.c_attn.weight` ->
h, h.0, h.0.attn, h.0.attn.c_attn), the ops' scopes from the chain of module *calls*. A
container that is never called (`nn.ModuleList` / `ModuleDict` iterated in forward) is in the
first chain and not in the second, so without this step a block's parameters and its ops would
fold at different depths and the block would be drawn twice (a box with its parameters beside
a cluster with its ops).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ..ids import ACC, param_id

#: kinds of node whose scope is not the chain of module calls that made them
_NOT_CALLS = ("param", "accumulate", "input")

if TYPE_CHECKING:
    from ..ids import Scope
    from .nodes import GradNode, ModuleScope


def call_prefixes(nodes: Sequence[GradNode]) -> dict[str, Scope]:
    """module path -> the call chain ending at its call, for paths with one such chain."""
    # the ops of one module call share one scope tuple: each distinct object is read once
    scopes = {id(n.scope): n.scope for n in nodes if n.kind not in _NOT_CALLS}
    seen: dict[str, set[Scope]] = {}
    for scope in scopes.values():
        for i, (path, call) in enumerate(scope):
            if call >= 0:
                seen.setdefault(path, set()).add(scope[: i + 1])
    return {path: next(iter(chains)) for path, chains in seen.items() if len(chains) == 1}


def aligned_scope(
    scope: Scope, prefixes: Mapping[str, Scope], modules: Mapping[str, ModuleScope]
) -> Scope:
    """`scope` (a parameter's, by name) rebased on the call chain of its deepest module that
    was called once; containers never called are left out of what remains."""
    for i in range(len(scope) - 1, -1, -1):
        path, call = scope[i]
        if call >= 0 and path in prefixes:
            return prefixes[path] + scope[i + 1 :]
    return tuple((p, c) for p, c in scope if p not in modules or modules[p].calls > 0)


def align_param_scopes(
    nodes: tuple[GradNode, ...], modules: Mapping[str, ModuleScope]
) -> tuple[GradNode, ...]:
    """`nodes` with parameters (and their AccumulateGrad nodes) in their modules' call chains."""
    if not any(n.kind == "param" for n in nodes):
        return nodes
    # a module's parameters and their AccumulateGrad nodes share one scope tuple: each distinct
    # object is aligned once (the dict keeps it alive, so its id stays its own)
    scopes = {id(n.scope): n.scope for n in nodes if n.kind == "param" or n.kind == "accumulate"}
    prefixes = call_prefixes(nodes)
    moved: dict[int, Scope] = {}
    for key, scope in scopes.items():
        aligned = aligned_scope(scope, prefixes, modules)
        if aligned != scope:
            moved[key] = aligned
    if not moved:  # the common case: every parameter is in its module's call chain already
        return nodes
    acc_of_param = ACC + param_id("")
    out = list(nodes)
    for i, n in enumerate(nodes):
        new = moved.get(id(n.scope))
        if new is not None and (
            n.kind == "param" or (n.kind == "accumulate" and n.id.startswith(acc_of_param))
        ):
            out[i] = dataclasses.replace(n, scope=new)
    return tuple(out)
