"""Changes to the watched parameters (frozen, unfrozen, replaced, added, removed), and the
`reason` they give a step where a parameter had no gradient. Torch-free: records read it back.

A parameter's state over the run is its events replayed in order: frozen or not, present or
removed. The watch records the parameters frozen when it starts as "frozen" at step 0 (their
first step), so a record alone says, for every None row, whether the parameter was frozen.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np

#: what can happen to a parameter, by name
KINDS = ("frozen", "unfrozen", "replaced", "added", "removed")
#: the `reason` column of history(): "" where the parameter had a gradient
REASONS = ("", "no gradient", "frozen", "removed")
_FROZEN, _REMOVED = 1, 2
_VERBS = {
    "added": "appeared",
    "frozen": "were frozen",
    "unfrozen": "were unfrozen",
    "replaced": "were replaced",
    "removed": "were removed",
}
#: what each change means for the record from that step on
_AFTER = {
    "added": "recorded from now on",
    "frozen": "their rows read none (frozen) while frozen",
    "unfrozen": "recorded again from now on",
    "replaced": "the new tensors go on under the same names",
    "removed": "their rows read none (removed)",
}


class Event(NamedTuple):
    """From `step` on, parameter `param` is `kind` (one of KINDS).

    Example:
        >>> Event(3, "stage1.0.weight", "unfrozen")
        Event(step=3, param='stage1.0.weight', kind='unfrozen')
    """

    step: int
    param: str
    kind: str


def advance(state: int, kind: str) -> int:
    """A parameter's state (bits: frozen, removed) after an event of `kind`."""
    if kind == "frozen":
        return state | _FROZEN
    if kind == "unfrozen":
        return state & ~_FROZEN
    if kind == "removed":
        return state | _REMOVED
    return state & ~_REMOVED  # added, replaced: the name holds a parameter again


def reason_code(state: int) -> int:
    """The REASONS index of a None row of a parameter in `state` (`advance`).

    Example:
        >>> REASONS[reason_code(advance(0, "frozen"))], REASONS[reason_code(0)]
        ('frozen', 'no gradient')
    """
    return 3 if state & _REMOVED else 2 if state & _FROZEN else 1


def timelines(events: Iterable[Event], names: Sequence[str]) -> dict[str, list[list[int]]]:
    """Per name in `names`, [step, state] (`advance`) from each step its events change it (the
    state after the last of a step's events), in step order.

    Example:
        >>> timelines([Event(0, "a", "frozen"), Event(5, "a", "unfrozen")], ["a", "b"])
        {'a': [[0, 1], [5, 0]], 'b': []}
    """
    out: dict[str, list[list[int]]] = {n: [] for n in names}
    state: dict[str, int] = {}
    for e in sorted(events, key=lambda e: e.step):  # stable: same-step events keep their order
        if e.param not in out:
            continue
        state[e.param] = now = advance(state.get(e.param, 0), e.kind)
        line = out[e.param]
        if line and line[-1][0] == e.step:
            line[-1][1] = now
        else:
            line.append([int(e.step), now])
    return out


def quiet(events: Iterable[Event], names: Sequence[str]) -> np.ndarray:
    """Per name: whether its None status is intended (frozen or removed), after `events`."""
    lines = timelines(events, names)
    return np.array([bool(lines[n] and lines[n][-1][1]) for n in names], dtype=bool)


def reason_codes(
    events: Sequence[Event], names: Sequence[str], steps: np.ndarray, none: np.ndarray
) -> np.ndarray:
    """Indices into REASONS for rows laid out step-major over `names` (as history() builds
    them): `steps` and `none` (status None) are flat, len(names) entries per step."""
    width = max(len(names), 1)
    state = np.zeros((len(steps) // width, len(names)), dtype=np.uint8)
    firsts = steps[::width]
    lines = timelines(events, names)
    for j, name in enumerate(names):
        if line := lines[name]:
            at, codes = np.array(line).T
            k = np.searchsorted(at, firsts, side="right") - 1
            state[:, j] = np.where(k >= 0, codes[np.maximum(k, 0)], 0)
    flat = state.reshape(-1)
    why = np.where(flat & _REMOVED, 3, np.where(flat & _FROZEN, 2, 1))  # as `reason_code`
    return np.where(none, why, 0).astype(np.int64)


def listed(names: Sequence[str], shown: int = 4) -> str:
    """The first `shown` names of a warning's list, and "..." when there are more.

    Example:
        >>> listed(["a", "b"]), listed(list("abcdef"))
        ('a, b', 'a, b, c, d ...')
    """
    return ", ".join(names[:shown]) + (" ..." if len(names) > shown else "")


def describe(events: Sequence[Event]) -> str:
    """One warning for a batch of changes, e.g. '2 parameter(s) were unfrozen at step 3 (a, b)'."""
    parts = []
    for kind in KINDS:
        hit = [e for e in events if e.kind == kind]
        if hit:
            shown = listed([e.param for e in hit])
            parts.append(
                f"{len(hit)} parameter(s) {_VERBS[kind]} at step {hit[0].step} ({shown}): "
                f"{_AFTER[kind]}"
            )
    return "GradWatch: " + "; ".join(parts) + " (watch.events lists every change)."


#: what a None cell says of its parameter (events.REASONS, in words the hover reads)
NONE_WORDS = ("", "trainable, but no gradient reached it", "frozen", "removed")


def none_why(events: list, names: list[str]) -> list[list[list[int]]]:
    """Per name, the steps from which its None reads as trainable-but-unreached (1), frozen
    (2) or removed (3) (`events.REASONS` order), from the run's parameter events: a frozen
    stage and a forgotten layer were both plain grey "no gradient (None)".

    Example:
        >>> none_why([Event(0, "a", "frozen"), Event(5, "a", "unfrozen")], ["a", "b"])
        [[[0, 2], [5, 1]], []]
    """
    lines = timelines(events, names)
    return [[[step, reason_code(state)] for step, state in lines[n]] for n in names]
