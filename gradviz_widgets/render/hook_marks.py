"""Which drawn nodes show which hooks and modifiers (the hook marker and its words), for the
widget and the offline page alike: a fold never hides a hook."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import ids
from ..graph.grad_graph import GradGraph
from ..graph.nodes import GradNode
from .dot import hook_fields


def hook_words(
    hooks: Sequence[tuple[str, str]], modifiers: Mapping[str, str]
) -> list[tuple[str, str]]:
    """(target, words) for each hook and modifier that is on ("backward at gate").

    Example:
        >>> hook_words([("", "forward")], {"main2": "scale by 0.5"})
        [('', 'forward at (root)'), ('main2', 'scale by 0.5 at main2')]
    """
    on = [(t, f"{kind} at {t or '(root)'}") for t, kind in hooks]
    return on + [(t, f"{what} at {t or '(root)'}") for t, what in modifiers.items()]


def plan_text(hooks: Sequence[tuple[str, str]], modifiers: Mapping[str, str]) -> str:
    """The hooks and modifiers that are on, in words (the status line after a change not run).

    Example:
        >>> plan_text([("gate", "backward")], {"main2": "scale by 0.5"})
        'hooks on: backward at gate, scale by 0.5 at main2'
        >>> plan_text([], {})
        'no hooks on'
    """
    on = [words for _, words in hook_words(hooks, modifiers)]
    return "hooks on: " + ", ".join(on) if on else "no hooks on"


def hooked_at(
    view: GradGraph, hooks: list[tuple[str, str]], modifiers: dict[str, str]
) -> dict[str, list[str]]:
    """Node id -> the hooks and modifiers it shows, in words ("backward at layer2.0"), for the
    nodes of `view` drawn with the hook marker: a tensor hook on the node, a module hook or
    modifier on the module of an op node, and, on a folded module or ×N group, every hook and
    modifier on it or on a module (or node) folded inside it: a fold never hides a hook.

    Example:
        >>> from gradviz_widgets.graph.nodes import GradNode
        >>> g = GradGraph(nodes=(GradNode("module:layer2", "Sequential", "module", "layer2",
        ...     "layer2", members=("layer2.0/ReluBackward0#3",)),), edges=(), modules={})
        >>> hooked_at(g, [("layer2.0", "backward")], {})
        {'module:layer2': ['backward at layer2.0']}
    """
    on = hook_words([(t, k) for t, k in hooks if k != "tensor"], modifiers)
    tensor = {t: f"tensor at {t}" for t, k in hooks if k == "tensor"}
    out: dict[str, list[str]] = {}
    for n in view.nodes:
        found: list[str] = []
        if n.kind == "op":
            found = [what for t, what in on if t == n.module]
        elif n.kind == "module":
            spans = _spans(n, view)
            found = [what for t, what in on if any(_inside(t, s) for s in spans)]
            found += [tensor[m] for m in n.members if m in tensor]
        if n.id in tensor:
            found.append(tensor[n.id])
        if found:
            out[n.id] = list(dict.fromkeys(found))
    return out


def hooked_clusters(
    view: GradGraph, hooks: list[tuple[str, str]], modifiers: dict[str, str]
) -> dict[str, dict[str, object]]:
    """Module path -> its frame's hook marker (`dot.hook_fields`), for every unfolded module
    of `view` (drawn as a frame around its nodes) with a module hook or modifier of its own:
    a hook on `layer1` stays visible while `layer1` is open and its children are drawn.

    Example:
        >>> from gradviz_widgets.graph.nodes import GradNode
        >>> g = GradGraph(nodes=(GradNode("layer1.0/ReluBackward0#0", "ReluBackward0", "op",
        ...     "layer1.0", "ReluBackward0", scope=(("layer1", 0), ("layer1.0", 0))),),
        ...     edges=(), modules={})
        >>> hooked_clusters(g, [("layer1", "backward")], {})
        {'layer1': {'hooked': True, 'hooked_text': 'hooked: backward at layer1'}}
    """
    on = hook_words([(t, k) for t, k in hooks if k != "tensor"], modifiers)
    if not on:
        return {}
    framed: set[str] = set()
    for n in view.nodes:
        scope = n.scope[:-1] if n.kind == "module" else n.scope
        framed.update(path for path, _ in scope)
    out: dict[str, dict[str, object]] = {}
    for path in sorted(framed):
        words = list(dict.fromkeys(what for t, what in on if t == path))
        if words:
            out[path] = hook_fields(words)
    return out


def _spans(node: GradNode, view: GradGraph) -> list[str]:
    """The module paths a folded node stands for: its module, or for a ×N group each of its
    blocks (the parent's children from the first to the last)."""
    if not ids.is_group_id(node.id):
        return [node.module]
    parent, first, last = ids.parse_group_id(node.id)
    head = f"{parent}." if parent else ""
    scope = view.modules.get(parent)
    kids = list(scope.children) if scope is not None else []
    a, b = head + first, head + last
    if a in kids and b in kids:
        return kids[kids.index(a) : kids.index(b) + 1]
    return [a, b]  # a tree that does not list them: the ends at least


def _inside(target: str, path: str) -> bool:
    """Whether module `target` is `path` or folded inside it (the root holds no other)."""
    return target == path or (path != "" and target.startswith(path + "."))
