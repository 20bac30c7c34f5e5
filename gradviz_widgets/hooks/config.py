"""Hook kinds and the check of a hook's target against the model's module paths."""

from __future__ import annotations

import difflib
from collections.abc import Collection

from .. import ids
from ..errors import GradExplorerError, did_you_mean

MODULE_KINDS = ("forward_pre", "forward", "backward")
HOOK_KINDS = (*MODULE_KINDS, "tensor")
DEFAULT_KIND = "backward"


def check_hook(paths: Collection[str], target: str, kind: str) -> None:
    """Raise a GradExplorerError unless `kind` is a hook kind and `target` fits it.

    Example:
        >>> check_hook({"", "fc"}, "fc", "backward")
        >>> check_hook({"", "fc"}, "fc/AddmmBackward0#0", "tensor")
    """
    if kind not in HOOK_KINDS:
        raise GradExplorerError(f"hook kind must be one of {HOOK_KINDS}, got {kind!r}")
    if kind == "tensor":
        if not is_node_id(target):
            raise GradExplorerError(
                f"a tensor hook needs a graph node id (e.g. 'layer1/ReluBackward0#0'), got "
                f"{target!r}; for a module use kind='backward', 'forward' or 'forward_pre'"
            )
        return
    if target not in paths:
        close = difflib.get_close_matches(target, [p for p in paths if p], n=5)
        raise GradExplorerError(
            f"no module {target!r} in the model{did_you_mean(close)}; module paths are those "
            "of model.named_modules() ('' is the root)."
        )


def is_node_id(target: str) -> bool:
    """Whether `target` names a graph node (else a module path).

    Example:
        >>> is_node_id("fc/AddmmBackward0#0"), is_node_id("fc")
        (True, False)
    """
    leaves = tuple(ids.leaf_id(kind, "") for kind in ids.LEAF_KINDS)
    return "#" in target or target.startswith((*leaves, ids.ACC, ids.OUTPUT))


def modifier_kind(target: str) -> str:
    """The hook kind a modifier on `target` needs: "tensor" for a node, else "backward"."""
    return "tensor" if is_node_id(target) else "backward"
