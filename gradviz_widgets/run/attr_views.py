"""What a run's forward sees of a module's plain attributes, so that it leaves them as they were.

Parameters and buffers are swapped for stand-ins (run/model_state.py). Plain attributes hold
state too, and a forward may change it in place: a tensor counter (`self.calls += 1` on a
tensor), a list it appends to, a dict it fills. Some hold the module's own parameters, which
the forward tests by identity (`p in self.decay`, `any(p is q for q in self.no_decay)`,
`self.lr[id(p)]`): against the stand-ins those tests fail, and the run's gradients would
silently differ from the model's. So for the run each such attribute is replaced by a copy:

- a tensor that does not require grad by a clone (one per object, so aliases stay aliases; a
  tensor that is a parameter or buffer by its stand-in);
- a plain container (list, tuple, set, frozenset, dict; nested ones to `DEPTH` levels) by a copy
  whose parameters, buffers and tensors are what the run sees, and whose integers that are the
  `id()` of a parameter are its stand-in's id.

Afterwards every attribute gets its own object back, untouched. A container of more than
`MAX_ITEMS` elements is copied as it is, without looking inside (a vocabulary, a lookup table).
"""

from __future__ import annotations

import collections
from typing import Any

import torch
from torch import nn

#: the plain containers a run copies
CONTAINERS = frozenset({list, tuple, set, frozenset, dict, collections.OrderedDict})
#: torch's own dicts and sets on every module (hooks, `_parameters`, ...): never copied
MODULE_INTERNALS = frozenset(vars(nn.Module()))
DEPTH = 4  # levels of nested containers mapped
MAX_ITEMS = 10_000  # elements of one container looked into


class RunViews:
    """Copies of attribute values for one run, each original object copied once.

    Example:
        >>> real = nn.Parameter(torch.ones(2)); stand_in = real.detach()
        >>> views = RunViews({id(real): stand_in}, {id(real): id(stand_in)})
        >>> decay = {real}; run = views.of(decay)
        >>> stand_in in run, real in run, run is decay
        (True, False, False)
        >>> views.of({id(real): 2.0}) == {id(stand_in): 2.0}
        True
    """

    def __init__(self, seen: dict[int, Any], ids: dict[int, int]) -> None:
        #: id(original tensor) -> what the run sees (stand-ins to start with, then clones)
        self.seen = seen
        #: id(real parameter) -> id(its stand-in)
        self.ids = ids

    def of(self, value: Any, depth: int = 0) -> Any:
        """What the run sees of `value` (an attribute, or an element of one)."""
        if isinstance(value, torch.Tensor):
            return self._tensor(value)
        kind = type(value)
        if kind is int:
            return self.ids.get(value, value)
        if kind not in CONTAINERS:
            return value
        if depth >= DEPTH or len(value) > MAX_ITEMS:
            return kind(value)
        if kind is dict or kind is collections.OrderedDict:
            return kind((self.of(k, depth + 1), self.of(v, depth + 1)) for k, v in value.items())
        return kind(self.of(x, depth + 1) for x in value)

    def _tensor(self, t: torch.Tensor) -> torch.Tensor:
        view = self.seen.get(id(t))
        if view is None:
            view = self.seen[id(t)] = t if t.requires_grad else t.clone()
        return view


def viewed(key: str, value: Any) -> bool:
    """Whether attribute `key` holding `value` gets a copy for the run (its type is checked by
    the caller: a tensor or one of `CONTAINERS`)."""
    if isinstance(value, torch.Tensor):
        return not value.requires_grad
    return key not in MODULE_INTERNALS
