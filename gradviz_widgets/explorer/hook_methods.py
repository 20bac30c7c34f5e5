"""The hook methods of GradExplorer: a HookPlan replaced (never changed) on each call, and
what the newest run's hooks recorded."""

from __future__ import annotations

import difflib

from ..errors import GradExplorerError
from ..hooks.clash import HookFacts
from ..hooks.config import DEFAULT_KIND, check_hook, modifier_kind
from ..hooks.events import HookEvent, HookRecord
from ..hooks.modifiers import Modifier
from ..hooks.plan import HookPlan
from ..hooks.run import FALLBACK, FULL
from ..run.state import Capture


class HookControls:
    """Hooks and modifiers of an explorer; `_plan` is what the user turned on, `_learned` what
    runs found out about the modules (kept apart: no run changes the plan)."""

    _plan: HookPlan
    _learned: HookFacts
    _paths: frozenset[str]
    _last: Capture | None

    def _check_open(self) -> None:
        raise NotImplementedError

    def _changed(self, what: str) -> None:
        """Tell the explorer's listeners (its open widgets) that `what` changed."""
        raise NotImplementedError

    def toggle_hook(self, target: str, kind: str | None = None) -> bool:
        """Flip a hook on a module path (kind: forward_pre | forward | backward, default backward)
        or a graph node id (kind: tensor). Returns whether it is on now."""
        self._check_open()
        kind = kind or _default_kind(target)
        self._check_node(target, kind)
        on = (target, kind) not in self._plan.on
        check_hook(self._paths, target, kind)
        self._plan = self._plan.with_hook(target, kind, on)
        self._changed("hooks")
        return on

    def set_hook(self, target: str, kind: str | None = None, on: bool = True) -> bool:
        """Turn a hook on or off explicitly."""
        self._check_open()
        kind = kind or _default_kind(target)
        if on:
            self._check_node(target, kind)
        check_hook(self._paths, target, kind)
        self._plan = self._plan.with_hook(target, kind, on)
        self._changed("hooks")
        return on

    def _check_node(self, target: str, kind: str) -> None:
        """A tensor hook's node must be an op node of the newest graph (when one exists)."""
        if kind != "tensor" or self._last is None or "#" not in target:
            return  # other mistakes are named by check_hook
        graph = self._last.graph
        if target not in graph or graph.node(target).kind != "op":
            close = difflib.get_close_matches(
                target, [n.id for n in graph.nodes if n.kind == "op"], n=5
            )
            raise GradExplorerError(
                f"no op node {target!r} in the newest graph; tensor hooks go on op nodes "
                f"(parameter gradients are in the report). Did you mean {close}?"
            )

    def set_modifier(
        self,
        target: str,
        *,
        clip_norm: float | None = None,
        clip_value: float | None = None,
        scale: float | None = None,
    ) -> None:
        """Modify the gradient flowing back through `target` in explorer runs (one of the three);
        call with none of them to remove it. The report marks the gradients this changed."""
        given = {
            k: v
            for k, v in {"clip_norm": clip_norm, "clip_value": clip_value, "scale": scale}.items()
            if v is not None
        }
        if len(given) > 1:
            raise GradExplorerError(f"give one modifier at a time, got {sorted(given)}")
        try:
            modifier = Modifier(*next(iter(given.items()))) if given else None
        except ValueError as e:
            raise GradExplorerError(str(e)) from e
        check_hook(self._paths, target, modifier_kind(target))
        self._plan = self._plan.with_modifier(target, modifier)
        self._changed("hooks")

    def clear_hooks(self) -> None:
        """Turn every hook and modifier off."""
        self._plan = self._plan.cleared()
        self._changed("hooks")

    @property
    def hooks(self) -> list[tuple[str, str]]:
        """(target, kind) for each hook that is on."""
        return self._plan.active

    @property
    def hook_plan(self) -> HookPlan:
        """The hooks and modifiers that are on, as one immutable value (runs never change it)."""
        return self._plan

    @property
    def _hooks(self) -> HookPlan:
        # widget_controller.Settings reads `_hooks.modifiers`; modifier_objects is the public way
        return self._plan

    @property
    def modifier_objects(self) -> dict[str, Modifier]:
        """target -> the Modifier on it (immutable values; set them back with set_modifier)."""
        return dict(self._plan.modifiers)

    @property
    def modifiers(self) -> dict[str, str]:
        """target -> description of the modifier on it."""
        return {t: m.describe() for t, m in self._plan.modifiers.items()}

    @property
    def hook_record(self) -> HookRecord:
        """What the newest run's hooks registered, learned and recorded."""
        last = self._last.hooks if self._last is not None else None
        return last if last is not None else HookRecord(facts=self._learned)

    @property
    def events(self) -> list[HookEvent]:
        """What the hooks saw in the newest run, one record per firing."""
        return list(self.hook_record.events)

    @property
    def hook_mechanisms(self) -> dict[str, str]:
        """target -> how its backward hook is implemented (full backward hook or the fallback)."""
        # the fallback applies to every backward hook once one of them clashes with an
        # in-place op (torch does not say which module's output was modified)
        fallback = self._learned.fallback
        return {t: FALLBACK if t in fallback else FULL for t in self._plan.backward_targets()}

    @property
    def hook_seconds(self) -> float:
        """Wall time spent inside our hooks in the newest run (compare with report.duration_s)."""
        return self.hook_record.seconds


def _default_kind(target: str) -> str:
    return "tensor" if "#" in target else DEFAULT_KIND
