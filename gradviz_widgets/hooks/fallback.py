"""The backward-hook fallback: register_full_backward_hook done with tensor hooks, for modules
where it cannot be used (an output modified in place afterwards; a non-full backward hook on the
module).

grad_input: every tensor that requires grad in the arguments (nested ones and keyword arguments
too) is replaced by an alias (a view of all of it) with a hook, which sees the gradient flowing
from the module into that argument; where the module modifies the argument in place (an in-place
ReLU), a hook on the argument itself reports the gradient of the value before the change instead
(and modules known to write their arguments get only that hook: an in-place write into an alias
would replace the module's own op node by AsStrided + CopySlices, and ids would move).
grad_output: a hook on each output tensor, registered before anything downstream can modify it
in place, so it sees the gradient of the output as the module returned it; an output the module
also uses itself (an LSTM cell's state) includes that use, unlike the full backward hook. Slots
follow the flattened arguments / output; None where no gradient arrives. A modifier applies to
each argument's gradient on its own (clip_norm clips each tensor to the norm). Tensor hooks are
removed when the run ends.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..trace.walk import HOOK_NODE_MARK
from .events import Pending

if TYPE_CHECKING:
    from .clash import HookFacts
    from .modifiers import Modifier
    from .plan import HookPlan
    from .recorder import Recorder


class HookRun(Protocol):
    """What the fallback needs of the run it belongs to (`run.HookRun`, which owns it: named
    here so the fallback does not import its owner)."""

    rec: Recorder
    plan: HookPlan
    facts: HookFacts

    def add(self, handle: Any) -> None: ...


class FallbackBackward:
    """The forward-pre (`pre`) and forward (`post`) hooks of one module's fallback, for one run."""

    def __init__(self, run: HookRun, target: str) -> None:
        self.run, self.rec, self.target = run, run.rec, target
        self.modifier = run.plan.modifiers.get(target)
        self.current: list[tuple[Pending, list] | None] = []

    def _hook(
        self, p: Pending, name: str, slot: int, size: int, active: list[bool] | None = None
    ) -> Callable:
        modifier = self.modifier if name == "grad_input" else None
        body = grad_slot(self.rec, p, name, slot, size, modifier, active)
        return self.rec.guarded(self.target, "backward", body)

    def pre(self, module: nn.Module, args: tuple, kwargs: dict) -> tuple | None:
        call = self.rec.next_call(self.target, "backward")
        if not torch.is_grad_enabled():
            # no graph is recorded (no_grad, the first pass of a reentrant checkpoint):
            # nothing will flow back through this call
            self.current.append(None)
            return None
        # the event joins the run's events when its first gradient arrives, so calls that
        # backward never reaches (a checkpoint's recomputation) leave no empty event
        reason = self.run.facts.fallback.get(self.target, "tensor hooks asked for")
        mechanism = f"tensor hooks (fallback: {reason})"
        p = self.rec.new(self.target, "backward", mechanism, call, queue=False)
        flat, spec = tree_flatten((args, kwargs))
        where = slots(p, ("grad_output", "grad_input"), flat)
        direct = (
            getattr(module, "inplace", False) is True or self.target in self.run.facts.writes_args
        )
        watch = []
        for slot, i in enumerate(where):
            t = flat[i]
            if not (t.requires_grad and t.layout == torch.strided):
                continue
            if direct and t.grad_fn is not None:
                self.run.add(t.register_hook(self._hook(p, "grad_input", slot, len(where))))
                continue
            alias = _alias(t)
            self.run.add(alias.register_hook(self._hook(p, "grad_input", slot, len(where))))
            if t.grad_fn is not None:  # never a hook on a leaf (it may be the user's)
                active = [False]
                hook = self._hook(p, "grad_input", slot, len(where), active)
                self.run.add(t.register_hook(hook))
                watch.append((alias, alias._version, active))
            flat[i] = alias
        self.current.append((p, watch))
        return tree_unflatten(flat, spec)

    def post(self, module: nn.Module, args: tuple, output: Any) -> None:
        entry = self.current.pop() if self.current else None
        if entry is None:
            return
        p, watch = entry
        for alias, version, active in watch:
            # modified in place by the module: the alias's hook will not fire
            active[0] = alias._version != version
            if active[0]:  # next runs hook its arguments directly (ids stay put)
                self.run.facts = self.run.facts.writing(self.target)
        flat = tree_flatten(output)[0]
        where = slots(p, ("grad_output",), flat)
        for slot, i in enumerate(where):
            t = flat[i]
            if t.requires_grad:
                self.run.add(t.register_hook(self._hook(p, "grad_output", slot, len(where))))


def slots(p: Pending, names: tuple[str, ...], flat: list) -> list[int]:
    """Positions of the tensors in `flat`; sets up one empty slot per tensor under `names`."""
    where = [i for i, t in enumerate(flat) if isinstance(t, torch.Tensor)]
    for name in names:
        p.tensors[name] = [None] * len(where)
        if p.raw is not None:
            p.raw[name] = [None] * len(where)
    return where


def grad_slot(
    rec: Recorder,
    p: Pending,
    name: str,
    slot: int,
    size: int,
    modifier: Modifier | None,
    active: list[bool] | None,
) -> Callable:
    """A tensor hook that records the gradient in slot `slot` of `name` (and applies `modifier`)."""

    def body(grad: torch.Tensor) -> torch.Tensor | None:
        if active is not None and not active[0]:
            return None
        rec.use(p)
        rec.put(p, name, slot, size, grad)
        if modifier is None:
            return None
        changed = modifier.apply([grad])[0]
        if changed is not None:
            rec.put(p, name + "_modified", slot, size, changed)
        return changed

    return body


def _alias(t: torch.Tensor) -> torch.Tensor:
    """A view of all of `t`, as an AliasBackward0 node (so no id of the model's own view ops
    shifts) marked in its metadata as ours (HOOK_NODE_MARK), for graph code to leave out."""
    alias = torch.ops.aten.alias.default(t)
    alias.grad_fn.metadata[HOOK_NODE_MARK] = "hook alias"
    return alias
