"""HookPlan: the hooks and modifiers a user turned on, as an immutable value.

Only the explorer replaces its plan (through toggle_hook / set_hook / set_modifier /
clear_hooks); a run reads it and never changes it. What a run registered, learned and recorded
is its HookRecord (hooks/events.py), returned with the Capture.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from .config import DEFAULT_KIND, modifier_kind
from .modifiers import Modifier


def _no_modifiers() -> Mapping[str, Modifier]:
    return MappingProxyType({})


@dataclasses.dataclass(frozen=True)
class HookPlan:
    """(target, kind) pairs that are on, in the order turned on; modifiers per target.

    Example:
        >>> plan = HookPlan().with_hook("fc").with_modifier("fc2", Modifier("scale", 0.5))
        >>> plan.active
        [('fc', 'backward')]
        >>> plan.wanted()
        [('fc', 'backward'), ('fc2', 'backward')]
        >>> plan.with_hook("fc", on=False) == HookPlan(modifiers=plan.modifiers)
        True
    """

    on: tuple[tuple[str, str], ...] = ()
    modifiers: Mapping[str, Modifier] = dataclasses.field(default_factory=_no_modifiers)
    keep_tensors: bool = False  # events keep a copy of every tensor they saw

    @property
    def active(self) -> list[tuple[str, str]]:
        """(target, kind) pairs that are on, in the order they were turned on."""
        return list(self.on)

    def with_hook(self, target: str, kind: str = DEFAULT_KIND, on: bool = True) -> HookPlan:
        """This plan with one hook on or off (the caller checked the target)."""
        rest = tuple(h for h in self.on if h != (target, kind))
        kept = (target, kind) in self.on
        hooks = (self.on if kept else (*rest, (target, kind))) if on else rest
        return dataclasses.replace(self, on=hooks)

    def with_modifier(self, target: str, modifier: Modifier | None) -> HookPlan:
        """This plan with the modifier on `target` set, or removed when `modifier` is None."""
        mods = {t: m for t, m in self.modifiers.items() if t != target or modifier is not None}
        if modifier is not None:
            mods[target] = modifier
        return dataclasses.replace(self, modifiers=MappingProxyType(mods))

    def cleared(self) -> HookPlan:
        """Every hook and modifier off (keep_tensors stays)."""
        return HookPlan(keep_tensors=self.keep_tensors)

    def wanted(self) -> list[tuple[str, str]]:
        """Hooks a run registers: those on, plus those a modifier needs."""
        extra = [(t, modifier_kind(t)) for t in self.modifiers]
        return list(dict.fromkeys([*self.on, *extra]))

    def backward_targets(self) -> list[str]:
        """Module paths whose backward hook a run registers."""
        return [t for t, k in self.wanted() if k == "backward"]
