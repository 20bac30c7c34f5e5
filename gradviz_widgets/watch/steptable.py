"""The step-wide facts of a record: which steps the GradScaler skipped, the loss scale, and
whether the gradients were changed in place (clipped) before the optimizer used them.

They live in their own small table, `steps(step, skipped, scale, clipped)` (created if missing,
so records written before it still open: every step then reads not skipped, no scale, not
clipped); only steps with something to say have a row. Where one GradScaler skipped some
optimizers' steps and not others, the step is not skipped as a whole: the parameters that
were not updated are rows of `skipped_params(step, param)` (store.partly_skipped).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: a row of `steps`: (step, skipped, scale or None, clipped: 1 / 0 / None for unknown)
StepRow = tuple[int, int, "float | None", "int | None"]


def step_columns(
    steps: np.ndarray,
    rows: Sequence[tuple],
    ids: np.ndarray | None = None,
    partly: Sequence[tuple[int, int]] = (),
) -> dict:
    """skipped (the GradScaler skipped the step, or, `partly`: (step, param id), the step of
    the optimizer holding parameter `ids` of the row), scale (the loss scale, NaN without one),
    clipped (changed in place before the optimizer used it; <NA>: unknown) of each row."""
    import pandas as pd

    skipped = np.zeros(len(steps), dtype=bool)
    scale = np.full(len(steps), np.nan)
    clipped = pd.array(np.zeros(len(steps), dtype=bool), dtype="boolean")
    if rows:
        table = sorted(rows)
        keys = np.array([r[0] for r in table], dtype=np.int64)
        pos = np.clip(np.searchsorted(keys, steps), 0, len(keys) - 1)
        hit = keys[pos] == steps
        skipped[hit] = np.array([bool(r[1]) for r in table])[pos[hit]]
        scale[hit] = np.array([np.nan if r[2] is None else r[2] for r in table])[pos[hit]]
        flags = pd.array([None if r[3] is None else bool(r[3]) for r in table], dtype="boolean")
        clipped[hit] = flags[pos[hit]]
    if partly and ids is not None:
        pairs = np.array(partly, dtype=np.int64).reshape(-1, 2)
        base = int(max(ids.max(initial=0), pairs[:, 1].max(initial=0))) + 1
        skipped |= np.isin(steps.astype(np.int64) * base + ids, pairs[:, 0] * base + pairs[:, 1])
    return {"skipped": skipped, "scale": scale, "clipped": clipped}
