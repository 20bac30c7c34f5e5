"""Which parameters hold NaN/Inf values at a step whose gradients turned NaN/Inf.

A weight that holds an Inf (set so by hand, or by an earlier update that overflowed) makes the
gradients of many parameters NaN; the `nonfinite` anomaly lists all of those, and the weight
itself is the clue. At the optimizer's read point (before the update: afterwards an Adam step
makes every parameter that got a NaN gradient NaN too) the step's statistics are already on
the host on the CPU (and on accelerators when the step is host-checked anyway: `sync_check`),
so a finite step costs one numpy sum here and nothing on the device. Only a step where some
parameter's gradient turns NaN/Inf for the first time (exactly the writer's `nonfinite`
anomaly rule) counts the non-finite values of every watched parameter: one pass over them and
one host sync, at that step only. Nothing is written: the model, `.grad`, the optimizer and
the RNGs are untouched.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.nn.parameter import is_lazy

from ..run.nonfinite import nonfinite_counts
from ..vocabulary import named_few


@dataclasses.dataclass(frozen=True)
class Held:
    """What the read point of one step found out about parameters holding NaN/Inf values.

    `holders`: (name, non-finite elements, elements, the step its gradient first turned NaN/Inf
    if that was an earlier step, else None) of each parameter holding NaN/Inf before this
    step's update; `unchecked`: why nothing was checked ("" when it was)."""

    holders: tuple[tuple[str, int, int, int | None], ...] = ()
    unchecked: str = ""
    #: every gradient was finite at the end of backward: a change before step() made the NaN/Inf
    #: (None: the gradients were changed in place, and the backward's numbers were not read)
    made: bool | None = False

    def to_json(self) -> list[list[Any]]:
        return [list(h) for h in self.holders]


class HeldCheck:
    """Per watch: the first step each parameter's gradient was NaN/Inf, and the check."""

    def __init__(self) -> None:
        #: watched parameter slot -> the first step its gradient was NaN/Inf
        self.first: dict[int, int] = {}
        #: why no step can be checked (FSDP2 shards), "" when they can
        self.off = ""

    def check(
        self,
        step: int,
        host: np.ndarray | None,
        ids: Sequence[int],
        params: Sequence[torch.Tensor],
        names: Sequence[str],
        scan: Sequence[int] | None = None,
        made: bool | None = False,
    ) -> Held | None:
        """None for a step with nothing to say (every gradient finite, or none turned NaN/Inf
        for the first time); else what was found (`Held.unchecked` when `host`, the (n, 3)
        statistics of the parameters `ids`, is None: they stayed on the device). `scan`: the
        slots whose values are looked at (default all: several optimizers leave out the ones
        another optimizer already updated this round). `made`: the step's NaN/Inf was made
        between backward and the step (`timing.made_nonfinite`)."""
        if host is None:
            return UNCHECKED_ON_DEVICE
        if not len(host) or math.isfinite(float(host[:, 0].sum())):  # norm >= max |g|
            return None
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(host[:, 0]) | np.isinf(host[:, 1])
        rows = list(ids) if len(ids) == len(host) else list(range(len(host)))
        new = [i for i, b in zip(rows, bad.tolist()) if b and i not in self.first]
        if not new:
            return None
        for i in new:
            self.first[i] = step
        if self.off:
            return Held(unchecked=self.off)
        slots = list(range(len(params))) if scan is None else list(scan)
        slots = [i for i in slots if not is_lazy(params[i])]  # no values yet
        counts = nonfinite_counts([params[i] for i in slots])
        return Held(
            tuple(
                (names[i], k, params[i].numel(), self._before(i, step))
                for i, k in zip(slots, counts)
                if k
            ),
            made=made,
        )

    def _before(self, i: int, step: int) -> int | None:
        first = self.first.get(i)
        return first if first is not None and first < step else None


#: what a step whose statistics stayed on the device says
UNCHECKED_ON_DEVICE = Held(
    unchecked="which parameters held NaN/Inf before the update was not checked: the "
    "gradients' numbers stay on the accelerator at the step (reading them costs a host sync "
    "per step; GradWatch(..., sync_check=True) with the flight recorder on reads them); "
    "anomaly.explore() names them"
)


def held_detail(held: Held, skipped: bool = False) -> str:
    """The sentence of a `nonfinite` anomaly about the parameters that held NaN/Inf.

    Example:
        >>> print(held_detail(Held((("fc2.weight", 1, 64, 7),))))
        fc2.weight holds NaN/Inf (1 of 64 elements; its gradient was NaN/Inf first, at step 7) before this step's update: the NaN/Inf gradients start from its values, not from an op
        >>> print(held_detail(Held(), skipped=True))
        no parameter held NaN/Inf before it
        >>> print(held_detail(Held(made=True))[:61])
        every gradient was finite at the end of backward: the NaN/Inf
        >>> print(held_detail(Held(made=None))[:60])
        the gradients were changed in place between backward and opt
        >>> print(held_detail(Held((("a.weight", 4, 4, 3), ("b.bias", 2, 2, None)))))
        2 parameters hold NaN/Inf before this step's update: a.weight (4 of 4 elements; its gradient was NaN/Inf first, at step 3), b.bias (2 of 2 elements): the NaN/Inf gradients start from their values
        >>> print(held_detail(Held((("fc2.bias", 1, 2, None),))).split("; ")[1][:62])
        no recorded gradient of it was NaN/Inf (they are read as backw
    """
    if held.unchecked:
        return held.unchecked
    if held.made is not False and not held.holders:
        return MADE_DETAIL if held.made else CHANGED_DETAIL
    if not held.holders:
        if skipped:  # the scaler's overflow check at work: nothing to blame, but say so
            return "no parameter held NaN/Inf before it"
        return (
            "no parameter held NaN/Inf before this step's update: the NaN/Inf arose in this "
            "step's forward or backward (an op, or the batch; anomaly.explore() names the node)"
        )
    parts = [_holder(h) for h in held.holders]
    if len(parts) == 1:
        said = (
            f"{parts[0].replace(' (', ' holds NaN/Inf (', 1)} before this step's update: the "
            "NaN/Inf gradients start from its values, not from an op"
        )
    else:
        shown = named_few(parts, 6)
        said = (
            f"{len(parts)} parameters hold NaN/Inf before this step's update: {shown}: the "
            "NaN/Inf gradients start from their values"
        )
    return said + _after_backward(held)


#: a NaN/Inf anomaly whose gradients were finite at the end of backward
MADE_DETAIL = (
    "every gradient was finite at the end of backward: the NaN/Inf was made between backward "
    "and optimizer.step, by an in-place change to .grad (p.grad /= n with n = 0, "
    "clip_grad_norm_ of an Inf gradient), and this step's update applied it"
)


#: ... and one whose gradients were changed in place where the backward's were not read
CHANGED_DETAIL = (
    "the gradients were changed in place between backward and optimizer.step (the first such "
    "change this watch saw, so the backward's own numbers were not read): the NaN/Inf came "
    "from that change (p.grad /= n with n = 0, clip_grad_norm_ of an Inf gradient) or from the "
    "forward or backward (anomaly.explore() names the node)"
)


def _after_backward(held: Held) -> str:
    """Where NaN/Inf values came from that no recorded gradient had: the watch reads each
    gradient as backward makes it, so what changed it before step() is not in the record."""
    if any(since is not None for *_, since in held.holders):
        return ""
    return (
        "; no recorded gradient of it was NaN/Inf (they are read as backward makes them), so "
        "the NaN/Inf came in after a backward, in an earlier update: clip_grad_norm_ of an "
        "Inf gradient (it makes NaN), an in-place change to .grad, the optimizer's state, or "
        "a write to the weights"
    )


def _holder(h: tuple[str, int, int, int | None]) -> str:
    name, k, n, since = h
    first = f"; its gradient was NaN/Inf first, at step {since}" if since is not None else ""
    return f"{name} ({k:,} of {n:,} elements{first})"


def merge(parts: Sequence[Held | None]) -> Held | None:
    """Several optimizers' findings of one step as one (holders by name, once)."""
    found = [h for h in parts if h is not None]
    if not found:
        return None
    holders: dict[str, tuple[str, int, int, int | None]] = {}
    for h in found:
        holders.update({x[0]: x for x in h.holders})
    unchecked = next((h.unchecked for h in found if h.unchecked), "")
    return Held(tuple(holders.values()), "" if holders else unchecked)
