"""The parameters a GradWatch follows: every parameter of the model, by name, for the whole run.

A name keeps its slot (its row in the record) from the step it first appears: a frozen
parameter is there every step (no gradient, "frozen"), a parameter unfrozen, replaced by a new
tensor (a new head module, `load_state_dict(..., assign=True)`), added or removed mid-run is
followed from the step it changes, and each change becomes an `Event`.

The per-step check is a few C-level passes, because it runs at every optimizer step:
- structure: torch's global parameter / module registration hooks (every `setattr` of a
  Parameter or Module, `register_parameter`, `add_module`, `load_state_dict(assign=True)`) mark
  the set dirty when they touch one of the model's modules, and the total length of the
  modules' `_parameters` / `_modules` dicts catches deletions; only then is the model walked;
- flags: `requires_grad` is read only where it can matter this step, for the parameters
  without a gradient and the ones known frozen (one pass over `.grad` that the step needs anyway).

A lazy module's parameter (`nn.LazyLinear` before its first forward) has a slot from the start,
shape () until it is materialised: a forward hook on its module (and the per-step check) then
records its shape and hooks it. Materialising keeps the tensor object (the optimizer's too), so
no event is noted.
"""

from __future__ import annotations

import dataclasses
import operator
import weakref
from collections.abc import Callable
from itertools import compress, repeat
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _module
from torch.nn.parameter import is_lazy

from .events import Event
from .model_hooks import ModelHook
from .store import ParamInfo

_GRAD = operator.attrgetter("grad")
_REQ = operator.attrgetter("requires_grad")
_NONES = repeat(None)
#: stands in for a removed parameter: no gradient, not trainable
_GONE = torch.empty(0)


class ParamSet:
    """The watched parameters (`params`, `names`: one slot per name), their flags, identities
    and hooks. `take()` hands over what changed since the last call (new ParamInfos, Events).

    `hook`: registered as a post-accumulate-grad hook on every trainable parameter (None: none),
    including ones unfrozen or replaced later; `detach()` removes every one of them."""

    def __init__(self, model: nn.Module, hook: Callable[[torch.Tensor], None] | None) -> None:
        self.model, self.hook = model, hook
        self.params: list[torch.Tensor] = []
        self.names: list[str] = []
        self.infos: list[ParamInfo] = []
        self.trainable: list[bool] = []
        self._index: dict[str, int] = {}
        self._removed: dict[int, bool] = {}  # slot -> trainable before it was removed
        self._frozen: list[int] = []
        self._frozen_params: list[torch.Tensor] = []
        self._n_trainable = 0
        self._owner: list[tuple[dict | None, str]] = []  # each slot's `_parameters` dict, key
        self._handles: dict[int, Any] = {}
        self._made: list[torch.Tensor] = []  # parameters whose hook dict was None before us
        self._dicts: list[dict] = []
        self._mods: list[nn.Module] = []  # kept so their ids stay theirs
        self._mod_ids: set[int] = set()
        self._size = -1
        #: lazy parameters not materialised yet: slot -> the hook on their module
        self._lazy: dict[int, Any] = {}
        self.dirty = True
        self.lacking = False
        self._infos: list[ParamInfo] = []
        self._events: list[Event] = []
        _start(self)
        self._rescan(0, first=True)

    # ---- per step -----------------------------------------------------------------------
    def refresh(self, step: int) -> None:
        """Catch structural changes and flags of the frozen parameters (before a backward)."""
        if self._lazy:
            self._settle()
        if self.dirty or sum(map(len, self._dicts)) != self._size:
            self._rescan(step)
        if any(map(_REQ, self._frozen_params)):
            self._flags([i for i in self._frozen if self.params[i].requires_grad], step)

    def gradients(
        self, step: int, again: bool = True, only: set[int] | None = None
    ) -> tuple[list[int], list[torch.Tensor]]:
        """Slots with a gradient this step and their gradients (after catching changes);
        `only`: the slots whose flags count at this step (one optimizer's of several: the
        others' are frozen while it steps in Lightning's `toggle_optimizer`, and read at their
        own optimizer's step)."""
        if self._lazy:
            self._settle()
        if self.dirty or sum(map(len, self._dicts)) != self._size:
            self._rescan(step)
        grads = list(map(_GRAD, self.params))
        have = list(map(operator.is_not, grads, _NONES))
        ids = list(compress(range(len(grads)), have))
        if again and len(ids) != self._n_trainable and self._stale(have):
            self._rescan(step)  # a raw write into a `_parameters` dict: no hook saw it
            return self.gradients(step, again=False, only=only)
        frozen = self._frozen
        if len(ids) != self._n_trainable or (  # a trainable one without gradient, or
            frozen  # a frozen one unfrozen or with a gradient: read the flags that matter
            and (any(map(_REQ, self._frozen_params)) or any(map(have.__getitem__, frozen)))
        ):
            self._check_flags(have, step, only)
        #: whether a trainable parameter has no gradient this step (the `none` anomaly)
        self.lacking = len(ids) != self._n_trainable and any(
            map(operator.and_, self.trainable, map(operator.not_, have))
        )
        return ids, list(compress(grads, have))

    def arrived(self, ids: list[int]) -> None:
        """The slots `ids` got a gradient this step, some read as they arrived and taken away
        inside backward by another hook (watch/arrivals.py): `lacking` counts them as had."""
        if self.lacking:
            have = set(ids)
            self.lacking = any(t and i not in have for i, t in enumerate(self.trainable))

    def _stale(self, have: list[bool]) -> bool:
        """Whether a trainable parameter without a gradient left its module's dict."""
        lost = list(map(operator.and_, self.trainable, map(operator.not_, have)))
        return any(
            d is not None and d.get(key) is not p
            for (d, key), p in zip(compress(self._owner, lost), compress(self.params, lost))
        )

    def _check_flags(self, have: list[bool], step: int, only: set[int] | None = None) -> None:
        """Flags matter where there is no gradient (frozen, or an anomaly?) and for the ones
        known frozen (unfrozen?): only those are read (of `only`, when given)."""
        look = list(map(operator.not_, map(operator.and_, have, self.trainable)))
        if only is not None:
            look = [k and i in only for i, k in enumerate(look)]
        now = list(map(_REQ, compress(self.params, look)))
        if now != list(compress(self.trainable, look)):
            slots = compress(range(len(have)), look)
            self._flags([i for i, f in zip(slots, now) if f != self.trainable[i]], step)

    def take(self) -> tuple[list[ParamInfo], list[Event]]:
        infos, events = self._infos, self._events
        self._infos, self._events = [], []
        return infos, events

    def trainable_params(self) -> list[nn.Parameter]:
        return [p for p, t in zip(self.params, self.trainable) if t]  # type: ignore[misc]

    def first(self) -> torch.Tensor | None:
        """The first parameter still in the model (for the device / dtype check)."""
        return next((p for i, p in enumerate(self.params) if i not in self._removed), None)

    def detach(self) -> None:
        """Remove every hook; parameters whose hook dict was None get None back."""
        for i in list(self._handles):
            self._unhook(i)
        for handle in self._lazy.values():
            handle.remove()
        self._lazy.clear()
        _stop(self)

    # ---- changes ------------------------------------------------------------------------
    def _rescan(self, step: int, first: bool = False) -> None:
        self.dirty = False
        mods = list(self.model.modules())
        self._mods, self._mod_ids = mods, set(map(id, mods))
        # empty dicts can only grow through registration, which the hooks below see
        self._dicts = [d for m in mods for d in (m._parameters, m._modules) if d]
        self._size = sum(map(len, self._dicts))
        found = dict(self.model.named_parameters())
        owners = {n: m._parameters for n, m in self.model.named_modules()}
        for name, p in found.items():
            i = self._index.get(name)
            if i is None:
                self._add(name, p, step, first)
            elif self.params[i] is not p:
                self._replace(i, p, step)
            elif p.requires_grad != self.trainable[i]:
                self._flags([i], step)
        for name, i in self._index.items():
            if name not in found and i not in self._removed:
                self._unhook(i)
                self._removed[i] = self.trainable[i]
                self.params[i], self.trainable[i] = _GONE, False
                self._note(step, i, "removed")
        self._owner = [
            (None if i in self._removed else owners.get(n.rpartition(".")[0]), n.rpartition(".")[2])
            for i, n in enumerate(self.names)
        ]
        self._recount()

    def _recount(self) -> None:
        self._frozen = [i for i, t in enumerate(self.trainable) if not t and i not in self._removed]
        self._frozen_params = [self.params[i] for i in self._frozen]
        self._n_trainable = sum(self.trainable)

    def _add(self, name: str, p: torch.Tensor, step: int, first: bool) -> None:
        i = len(self.params)
        info = ParamInfo(i, name, name.rpartition(".")[0], *_shape(p), step)
        self._index[name] = i
        self.params.append(p)
        self.names.append(name)
        self.infos.append(info)
        self.trainable.append(p.requires_grad)
        self._infos.append(info)
        if not first:
            self._note(step, i, "added")
        if not p.requires_grad:
            self._note(step, i, "frozen")
        self._hook(i)

    def _replace(self, i: int, p: torch.Tensor, step: int) -> None:
        back = i in self._removed
        self._unhook(i)
        if back:
            self.trainable[i] = self._removed.pop(i)
        self.params[i] = p
        self._new_shape(i)
        self._note(step, i, "added" if back else "replaced")
        if p.requires_grad != self.trainable[i]:
            self._flags([i], step)
        self._hook(i)

    def _flags(self, slots: list[int], step: int) -> None:
        if not slots:
            return
        for i in slots:
            self.trainable[i] = not self.trainable[i]
            self._note(step, i, "unfrozen" if self.trainable[i] else "frozen")
            self._hook(i)
        self._recount()

    def _note(self, step: int, i: int, kind: str) -> None:
        self._events.append(Event(step, self.names[i], kind))

    def _new_shape(self, i: int) -> None:
        """Slot i's tensor has a new shape (replaced, or materialised): its info follows."""
        shape, numel = _shape(self.params[i])
        info = self.infos[i]
        if info.shape != shape or info.numel != numel:
            info = self.infos[i] = dataclasses.replace(info, shape=shape, numel=numel)
            self._infos.append(info)

    # ---- lazy parameters ----------------------------------------------------------------
    def _wait_lazy(self, i: int) -> None:
        """Slot i holds a lazy parameter: settle it after its module's next forward."""
        if i in self._lazy:
            return
        module = self.model.get_submodule(self.names[i].rpartition(".")[0])
        self._lazy[i] = module.register_forward_hook(ModelHook(self._settle_hook))

    def _settle_hook(self, *args: Any) -> None:
        try:
            self._settle()
        except Exception:  # noqa: BLE001  (the training goes on; the step's check retries)
            pass

    def _settle(self) -> None:
        """Lazy parameters materialised since the last look: their shape, and their hook."""
        for i in [i for i in self._lazy if not is_lazy(self.params[i])]:
            self._lazy.pop(i).remove()
            self._new_shape(i)
            self._hook(i)

    # ---- hooks --------------------------------------------------------------------------
    def _hook(self, i: int) -> None:
        p = self.params[i]
        if is_lazy(p):  # torch refuses hooks on it: hooked once it is materialised
            self._wait_lazy(i)
            return
        if self.hook is None or i in self._handles or not p.requires_grad:
            return
        if p._post_accumulate_grad_hooks is None:
            self._made.append(p)
        handle = self._handles[i] = p.register_post_accumulate_grad_hook(self.hook)
        _first(p._post_accumulate_grad_hooks, handle.id)  # type: ignore[arg-type]

    def _unhook(self, i: int) -> None:
        handle = self._handles.pop(i, None)
        if handle is None:
            return
        handle.remove()
        p = self.params[i]
        for k, q in enumerate(self._made):
            if q is p:
                del self._made[k]
                if not p._post_accumulate_grad_hooks:
                    p._post_accumulate_grad_hooks = None  # type: ignore[assignment]  # torch's default
                break


def _first(hooks: dict, key: int) -> None:
    """Put hook `key` first: another hook may take the gradient away (watch/arrivals.py).
    torch runs them in the dict's insertion order (an OrderedDict's `move_to_end` does not
    change that), so the same dict, which the handles remove from, is refilled."""
    items = list(hooks.items())
    hooks.clear()
    hooks[key] = dict(items)[key]
    hooks.update((k, h) for k, h in items if k != key)


def _shape(p: torch.Tensor) -> tuple[tuple[int, ...], int]:
    """(shape, numel); () and 0 for a lazy parameter not materialised yet."""
    return ((), 0) if is_lazy(p) else (tuple(p.shape), p.numel())


# ---- torch's global registration hooks, one pair for every live ParamSet ------------------
_LIVE: weakref.WeakSet[ParamSet] = weakref.WeakSet()
_HANDLES: list[Any] = []


def _registered(module: nn.Module, name: str, value: Any) -> None:
    for watched in list(_LIVE):
        if id(module) in watched._mod_ids:
            watched.dirty = True


def _start(watched: ParamSet) -> None:
    _LIVE.add(watched)
    if not _HANDLES:
        _HANDLES.append(_module.register_module_parameter_registration_hook(_registered))
        _HANDLES.append(_module.register_module_module_registration_hook(_registered))


def _stop(watched: ParamSet) -> None:
    _LIVE.discard(watched)
    if not _LIVE:
        for handle in _HANDLES:
            handle.remove()
        _HANDLES.clear()
