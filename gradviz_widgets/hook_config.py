"""HookConfig: which hooks and modifiers are on, validated against the model's module paths."""

from __future__ import annotations

import difflib

from torch import nn

from .errors import GradExplorerError
from .modifiers import Modifier

MODULE_KINDS = ("forward_pre", "forward", "backward")
HOOK_KINDS = (*MODULE_KINDS, "tensor")
DEFAULT_KIND = "backward"


class HookConfig:
    """The hooks a user turned on (module paths or graph node ids) and the modifiers.

    Example:
        >>> config = HookConfig(nn.Sequential(nn.Linear(2, 2)))
        >>> config.toggle("0")
        True
        >>> config.active
        [('0', 'backward')]
    """

    def __init__(self, model: nn.Module) -> None:
        self._paths = {p for p, _ in model.named_modules()}
        self._on: dict[tuple[str, str], None] = {}
        self.modifiers: dict[str, Modifier] = {}
        self.fallback: set[str] = set()  # backward hooks done with tensor hooks instead
        self.fallback_reasons: dict[str, str] = {}
        # modules seen writing into an argument in place (learned by the fallback): their
        # arguments are hooked as they are, not through an alias, whose in-place write would
        # add view-replay nodes (AsStrided / CopySlices) and move the graph's ids
        self.writes_args: set[str] = set()

    @property
    def active(self) -> list[tuple[str, str]]:
        """(target, kind) pairs that are on, in the order they were turned on."""
        return list(self._on)

    def set(self, target: str, kind: str = DEFAULT_KIND, on: bool = True) -> bool:
        """Turn one hook on or off; returns whether it is on now."""
        self._check(target, kind)
        if on:
            self._on[(target, kind)] = None
        else:
            self._on.pop((target, kind), None)
        return on

    def toggle(self, target: str, kind: str = DEFAULT_KIND) -> bool:
        """Flip one hook; returns whether it is on now."""
        return self.set(target, kind, (target, kind) not in self._on)

    def set_modifier(self, target: str, modifier: Modifier | None) -> None:
        """Modify the gradient flowing back through `target` (a module's grad_input, or a graph
        node's incoming gradient) in explorer runs; None removes it."""
        kind = "tensor" if _is_node_id(target) else "backward"
        self._check(target, kind)
        if modifier is None:
            self.modifiers.pop(target, None)
        else:
            self.modifiers[target] = modifier

    def _wanted(self) -> list[tuple[str, str]]:
        """Hooks to register: those on, plus those a modifier needs."""
        extra = [(t, "tensor" if _is_node_id(t) else "backward") for t in self.modifiers]
        return list(dict.fromkeys([*self._on, *extra]))

    def clear(self) -> None:
        """Turn every hook and modifier off."""
        self._on.clear()
        self.modifiers.clear()

    def _check(self, target: str, kind: str) -> None:
        if kind not in HOOK_KINDS:
            raise GradExplorerError(f"hook kind must be one of {HOOK_KINDS}, got {kind!r}")
        if kind == "tensor":
            if not _is_node_id(target):
                raise GradExplorerError(
                    f"a tensor hook needs a graph node id (e.g. 'layer1/ReluBackward0#0'), got "
                    f"{target!r}; for a module use kind='backward', 'forward' or 'forward_pre'"
                )
            return
        if target not in self._paths:
            close = difflib.get_close_matches(target, [p for p in self._paths if p], n=5)
            raise GradExplorerError(
                f"no module {target!r} in the model; did you mean {close}? "
                "Module paths are those of model.named_modules() ('' is the root)."
            )

    # ---- fallback for modules whose output is modified in place ----------------------------
    def can_fall_back(self, error: BaseException) -> bool:
        """True when `error` says register_full_backward_hook cannot work here (it clashed with an
        in-place op, or a module returns what it cannot see into) and a fallback is left."""
        text = f"{error} {error.__cause__}"
        backward = {t for t, k in self._wanted() if k == "backward"}
        # in-place on the hook's output, or on a view of it ("... created inside a custom
        # Function"); a model whose own custom Function does that fails again, unchanged
        clash = (
            "BackwardHookFunction" in text
            or "created inside a custom Function" in text
            or isinstance(error, _Unhookable)
        )
        return clash and bool(backward - self.fallback)

    def fall_back(self) -> None:
        """Use tensor hooks instead of register_full_backward_hook for every backward hook."""
        for t, k in self._wanted():
            if k == "backward" and t not in self.fallback:
                self.fallback.add(t)
                self.fallback_reasons.setdefault(t, "register_full_backward_hook failed here")


class _Unhookable(GradExplorerError):
    """register_full_backward_hook cannot work on a module; the explorer retries with tensor hooks."""


def _is_node_id(target: str) -> bool:
    return "#" in target or target.startswith(("param:", "input:", "acc:", "output"))
