"""Gradients of the loss with respect to the run's leaves, without touching anyone's `.grad`.

Leaves are our stand-ins and inputs, tensors the graph reached otherwise, and the model's own
Parameters: a parameter used other than through a module attribute (a list captured before the
run, `optimizer.param_groups`, a plain Python list of weights in `forward`) reaches the graph as
itself, not as its stand-in. Its contribution is asked for too and added to the stand-in's,
so the parameter's gradient equals what a plain `loss.backward()` would put in `.grad`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .. import ids
from ..errors import GradExplorerError
from ..trace.walk import RawGraph
from .model_state import StandIns
from .reentrant import SeenLeaves

#: torch.utils.checkpoint(use_reentrant=True): refuses torch.autograd.grad
REENTRANT_CHECKPOINT = "CheckpointFunctionBackward"


def gradients(
    loss: torch.Tensor,
    wanted: Sequence[torch.Tensor],
    reentrant: bool,
    protect: Sequence[torch.Tensor] = (),
    checkpoints: Sequence[Any] = (),
) -> tuple:
    """d loss / d each of `wanted` (None where unused). `protect`: tensors whose `.grad` must
    come out as it went in (the model's Parameters, which reentrant backward may write);
    `checkpoints`: the reentrant checkpoints' autograd nodes (any leaf their recomputation
    meets gets its `.grad` back too)."""
    if not wanted:
        return ()
    try:
        if reentrant:
            return _grads_by_backward(loss, wanted, protect, checkpoints)
        return torch.autograd.grad(loss, list(wanted), allow_unused=True)
    except GradExplorerError:
        raise
    except RuntimeError as e:
        raise GradExplorerError(
            f"Backward failed: {e}\nIf it names an in-place operation, the model modifies a "
            "tensor that autograd saved (use the out-of-place op). The model was not changed."
        ) from e


def _grads_by_backward(
    loss: torch.Tensor,
    wanted: Sequence[torch.Tensor],
    protect: Sequence[torch.Tensor],
    checkpoints: Sequence[Any],
) -> tuple:
    """`.backward()` for graphs that refuse `.grad()` (reentrant checkpoint).

    The checkpoint's recomputation runs its own backward during ours, which accumulates into
    whatever leaves it meets: every wanted and protected tensor starts from `.grad = None`,
    what accumulated is read, and each gets its own `.grad` object back (value untouched: the
    object was out of reach while backward ran).
    """
    everyone = list({id(t): t for t in [*wanted, *protect]}.values())
    saved = [t.grad for t in everyone]
    seen = SeenLeaves()  # any other leaf the recomputation meets (a tensor a closure holds)
    try:
        for t in everyone:
            t.grad = None
        with seen.during(checkpoints):
            loss.backward()
        return tuple(t.grad for t in wanted)
    finally:
        seen.restore()
        for t, g in zip(everyone, saved):
            t.grad = g


def summed(
    ids: Sequence[str], grads: Sequence[torch.Tensor | None]
) -> dict[str, torch.Tensor | None]:
    """Gradients of leaves that share an id (a parameter's stand-in and the parameter itself)
    added up; None where no part got one."""
    out: dict[str, torch.Tensor | None] = {}
    for leaf_id, g in zip(ids, grads):
        have = out.get(leaf_id)
        if g is None:
            out.setdefault(leaf_id, None)
        elif have is None:
            out[leaf_id] = g
        else:
            out[leaf_id] = have + g.to(have.device)
    return out


def wanted_leaves(raw: RawGraph, stand_ins: StandIns) -> list[tuple[str, torch.Tensor]]:
    """(leaf id, tensor) for every leaf to differentiate: the graph's leaves, every parameter's
    stand-in, and every real Parameter (reentrant checkpoints may reach those only during
    backward); entries sharing an id are summed."""
    wanted = [(leaf.id, leaf.tensor) for leaf in raw.leaves if leaf.tensor is not None]
    seen = {id(t) for _, t in wanted}
    for params in (stand_ins.params, stand_ins.real_params):
        wanted += [
            (ids.param_id(n), p) for n, p in params.items() if p.requires_grad and id(p) not in seen
        ]
    return wanted


def direct_use_note(
    wanted: list[tuple[str, torch.Tensor]], parts: tuple, stand_ins: StandIns
) -> tuple[str, ...]:
    """A finding naming the parameters the graph reached as themselves, not via the model."""
    names = sorted(
        {
            stand_ins.real[id(t)][0]
            for (_, t), g in zip(wanted, parts)
            if g is not None and id(t) in stand_ins.real
        }
    )
    if not names:
        return ()
    return (
        f"{len(names)} parameter{'s' if len(names) > 1 else ''} also used directly, not "
        "through the model's attributes (a parameter list captured before the run, "
        "optimizer.param_groups, a plain Python list in forward): that use is included in "
        f"the gradient, as in plain backward: {', '.join(names[:4])}"
        + ("…" if len(names) > 4 else ""),
    )
