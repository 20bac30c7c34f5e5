"""Several optimizers on one model (a GAN's generator and discriminator): what a step is.

Each parameter belongs to the optimizer whose param_groups hold it (parameters no optimizer
holds go with the first one). Step k of a parameter is the k-th step of its own optimizer, so a
watch step is a round: every optimizer's k-th step, merged into one record once all of them
took it. Rows never mix two steps of one optimizer, and nothing is counted twice. One
optimizer: every parameter is its own, each step is emitted at once (as before).
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from ..errors import user_stacklevel
from .steps import StepRecord, combine

#: steps one optimizer may run ahead of another before its records go out alone
MAX_AHEAD = 64


def as_list(optimizer: Any) -> list[Any]:
    """None, an optimizer, or a list/tuple of them, as a list."""
    if optimizer is None:
        return []
    return list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]


class Rounds:
    """Per-optimizer step counts, parameter ownership and the records waiting for a round."""

    def __init__(self, optimizers: list[Any], start: int = 0) -> None:
        self.optimizers = optimizers
        #: each optimizer's next step number (the first is `start`, GradWatch(start_step=))
        self.counts = [start] * len(optimizers)
        #: optimizer j's step ran since the scaler's last update
        self.stepped = [False] * len(optimizers)
        self._owned: list[list[int]] = [[] for _ in optimizers]
        self._key: Any = None
        self._waiting: dict[int, list[StepRecord]] = {}
        self._warned = False

    def owned(self, j: int, params: list[torch.Tensor]) -> list[int]:
        """Indices into `params` that optimizer j reads at its step."""
        if len(self.optimizers) == 1:
            return list(range(len(params)))
        key = (
            len(params),
            tuple(sum(len(g["params"]) for g in o.param_groups) for o in self.optimizers),
        )
        if key != self._key:
            self._key = key
            where = {
                id(p): k
                for k, o in enumerate(self.optimizers)
                for g in o.param_groups
                for p in g["params"]
            }
            self._owned = [[] for _ in self.optimizers]
            for i, p in enumerate(params):
                self._owned[where.get(id(p), 0)].append(i)
        return self._owned[j]

    @property
    def done(self) -> int:
        """Rounds complete so far (what `GradWatch.steps` says)."""
        return min(self.counts)

    def add(self, j: int, record: StepRecord) -> list[StepRecord]:
        """Optimizer j's record of its step `record.step`; the rounds now complete."""
        self.counts[j] += 1
        if len(self.optimizers) == 1:
            return [record]
        self._waiting.setdefault(record.step, []).append(record)
        out = []
        for step in sorted(self._waiting):
            parts = self._waiting[step]
            if step < self.done or (max(self.counts) - step > MAX_AHEAD and self._ahead()):
                out.append(
                    combine(self._waiting.pop(step))
                    if len(parts) > 1
                    else self._waiting.pop(step)[0]
                )
            else:
                break
        return out

    def flush(self) -> list[StepRecord]:
        """What is still waiting (the watch closes): incomplete rounds go out as they are."""
        out = [combine(parts) for _, parts in sorted(self._waiting.items())]
        self._waiting.clear()
        return out

    def _ahead(self) -> bool:
        if not self._warned:
            self._warned = True
            names = ", ".join(
                f"{type(o).__name__}: {c}" for o, c in zip(self.optimizers, self.counts)
            )
            warnings.warn(
                f"GradWatch: one optimizer steps far more often than another ({names} steps); "
                "each parameter's step k is its own optimizer's k-th step, so rounds more "
                f"than {MAX_AHEAD} steps behind are written without the slower optimizer's "
                "parameters (they read `none` there; its own k-th step comes later as a "
                "second row of step k). Watch such loops with one GradWatch per optimizer's "
                "module, or step them at the same rate",
                stacklevel=user_stacklevel(),
            )
        return True
