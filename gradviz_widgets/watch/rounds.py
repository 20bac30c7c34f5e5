"""Several optimizers on one model (a GAN's generator and discriminator): what a step is.

Each parameter belongs to the optimizer whose param_groups hold it (parameters no optimizer
holds go with the first one). Step k of a parameter is the k-th step of its own optimizer, so a
watch step is a round: every optimizer's k-th step, merged into one record once all of them
took it. Rows never mix two steps of one optimizer, and nothing is counted twice. One
optimizer: every parameter is its own, each step is emitted at once (as before).

Optimizers stepping at different rates (5 critic steps per generator step) cannot be paired
so: the faster one's k-th step comes long before the slower one's, or never. A round is
written once, whole, or not at all: an optimizer more than MAX_AHEAD steps ahead of the
slowest has its further steps (and those rounds) left out, and so do the rounds still
incomplete at close (more than one: a loop stopped mid-round leaves one, written as it is).
Writing them in parts gave a second row of the same step and false `none` rows for the
optimizer that had not stepped. What is left out is said in one warning and in `note` (the
run's meta, key "rounds").
"""

from __future__ import annotations

import bisect
import warnings
from typing import Any

import torch

from ..errors import user_stacklevel
from .steps import StepRecord, combine

#: steps one optimizer may run ahead of the slowest before its steps are left out
MAX_AHEAD = 64
#: what the warnings about optimizers at different rates advise
ONE_WATCH_EACH = (
    "Record such loops (n critic steps per generator step) with one GradWatch per optimizer's "
    "module: GradWatch(model.critic, optimizer=opt_d, ...) and GradWatch(model.generator, "
    "optimizer=opt_g, ...)"
)


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
        self._waiting: dict[int, list[tuple[int, StepRecord]]] = {}
        #: rounds left out, as sorted [first, last] ranges (only those some part may still join)
        self._left: list[list[int]] = []
        #: per optimizer: [steps left out, first, last]
        self._lost = [[0, -1, -1] for _ in optimizers]
        #: the first step at which one optimizer was two steps ahead of another (None: never):
        #: from then on a round pairs steps of different iterations of the loop
        self.uneven: int | None = None

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

    @property
    def note(self) -> str | None:
        """What the record leaves out or pairs across iterations because the optimizers step
        at different rates (None: nothing)."""
        lost = [(j, n, a, b) for j, (n, a, b) in enumerate(self._lost) if n]
        if not lost:
            return None if self.uneven is None else self._uneven_note()
        said = "; ".join(
            f"{self._name(j)}: {n} step(s) not recorded ({_span(a, b)})" for j, n, a, b in lost
        )
        mixed = (
            f" The rows of one watch step come from different iterations of the loop from "
            f"step {self.uneven} at the latest."
            if self.uneven is not None
            else ""
        )
        return (
            f"the optimizers step at different rates ({self._counts()} steps) and each watch "
            f"step k pairs every optimizer's k-th step, so unpaired steps are left out: {said}."
            f"{mixed} Record such loops (n critic steps per generator step) with one GradWatch per "
            "optimizer's module."
        )

    def add(self, j: int, record: StepRecord) -> list[StepRecord]:
        """Optimizer j's record of its step `record.step`; the rounds now complete."""
        self.counts[j] += 1
        if len(self.optimizers) == 1:
            return [record]
        if self.uneven is None and self.counts[j] - self.done >= 2:
            self.uneven = record.step
            warnings.warn("GradWatch: " + self._uneven_note(), stacklevel=user_stacklevel())
        step = record.step
        if self._is_left(step) or step - self.done >= MAX_AHEAD:
            self._leave_out(step, [(j, record)])
        else:
            self._waiting.setdefault(step, []).append((j, record))
        out = []
        done = self.done
        for s in sorted(self._waiting):
            if s >= done:
                break
            parts = self._waiting.pop(s)
            if self._is_left(s):
                self._leave_out(s, parts)
            else:
                out.append(combine(_in_order(parts)) if len(parts) > 1 else parts[0][1])
        while self._left and self._left[0][1] < done:  # no part of these rounds can come
            self._left.pop(0)
        return out

    def flush(self) -> list[StepRecord]:
        """The rounds still waiting (the watch closes). One (a loop stopped mid-round) goes out
        as it is; more are a loop whose optimizers step at different rates: left out."""
        waiting = sorted(self._waiting.items())
        self._waiting.clear()
        if len(waiting) == 1 and not any(n for n, _, _ in self._lost):
            return [combine(_in_order(waiting[0][1]))]
        for step, parts in waiting:
            self._leave_out(step, parts)
        return []

    # ---- rounds left out ----------------------------------------------------------------
    def _is_left(self, step: int) -> bool:
        k = bisect.bisect_right(self._left, [step, float("inf")]) - 1
        return k >= 0 and self._left[k][0] <= step <= self._left[k][1]

    def _leave_out(self, step: int, parts: list[tuple[int, StepRecord]]) -> None:
        """Round `step` is not written; `parts` are the steps of it that are lost."""
        if not any(n for n, _, _ in self._lost):
            warnings.warn("GradWatch: " + self.note_for(step, parts), stacklevel=user_stacklevel())
        if not self._is_left(step):
            last = self._left[-1] if self._left else None
            if last is not None and last[1] + 1 == step:
                last[1] = step
            else:
                bisect.insort(self._left, [step, step])
        for j, _ in parts:
            lost = self._lost[j]
            lost[0] += 1
            lost[1] = step if lost[1] < 0 else min(lost[1], step)
            lost[2] = max(lost[2], step)

    def note_for(self, step: int, parts: list[tuple[int, StepRecord]]) -> str:
        """The warning said at the first round left out."""
        who = ", ".join(sorted({self._name(j) for j, _ in parts}))
        return (
            f"the optimizers step at different rates ({self._counts()} steps so far); each "
            "watch step k pairs every optimizer's k-th step, and step "
            f"{step} of {who} cannot be paired (more than {MAX_AHEAD} steps ahead, or the "
            "watch closed before the others took theirs). Such steps are NOT recorded (no "
            f"round is written in part); the run's meta 'rounds' says which. {ONE_WATCH_EACH}"
        )

    def _uneven_note(self) -> str:
        """Said when one optimizer is first two steps ahead of another: in a loop whose
        optimizers step alike (a GAN's generator and discriminator) none is ever more than one
        ahead."""
        return (
            f"the optimizers step at different rates ({self._counts()} steps when one took "
            f"its step {self.uneven}): each watch step k pairs every optimizer's k-th step, so "
            f"the rows of one watch step come from different iterations of the loop. {ONE_WATCH_EACH}"
        )

    def _name(self, j: int) -> str:
        return f"optimizer {j + 1} of {len(self.optimizers)} ({type(self.optimizers[j]).__name__})"

    def _counts(self) -> str:
        return " / ".join(str(c) for c in self.counts)


def _span(first: int, last: int) -> str:
    return f"step {first}" if first == last else f"steps {first}-{last}"


def _in_order(parts: list[tuple[int, StepRecord]]) -> list[StepRecord]:
    """A round's parts by optimizer, not by arrival: the first optimizer's scale is the round's
    (a step the scaler skipped is recorded at its `update`, after the others had stepped)."""
    return [r for _, r in sorted(parts, key=lambda part: part[0])]
