"""`optimizer.step(closure)`: the closure (forward and backward) runs inside the step, after the
step's pre-hooks. Lightning steps every optimizer so (except under a GradScaler), LBFGS always.
The gradients of such a step exist only once the closure has run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def after_closure(args: tuple, kwargs: dict, read: Callable[[], None]) -> tuple[tuple, dict] | None:
    """The step's (args, kwargs) with its closure wrapped so `read` runs right after the
    closure's first call (its loss returned unchanged); None for a step without a closure.
    `args[0]` is the optimizer itself (a step pre-hook's arguments)."""
    closure = kwargs["closure"] if "closure" in kwargs else (args[1] if len(args) > 1 else None)
    if not callable(closure):
        return None
    calls = [0]

    def read_after() -> Any:
        loss = closure()
        calls[0] += 1
        if calls[0] == 1:  # LBFGS calls it again at points it only tries
            read()
        return loss

    if "closure" in kwargs:
        return args, {**kwargs, "closure": read_after}
    return (args[0], read_after, *args[2:]), kwargs
