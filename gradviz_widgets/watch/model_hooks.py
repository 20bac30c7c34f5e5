"""What a GradWatch puts into the model's own hook dicts.

Copies of a watched model are common in training loops: an EMA or SWA model
(`copy.deepcopy(model)`, `torch.optim.swa_utils.AveragedModel(model)`), `torch.save(model)`,
a teacher. A bound method of the recorder in the model's hook dicts would be copied along with
the recorder (its writer thread's locks cannot be pickled: "cannot pickle '_thread.lock'").
A `ModelHook` copies or pickles as an inert hook instead, made of the standard library only
(`inert()`): it holds nothing and does nothing, so the copy is simply not watched, the original
keeps being watched, and a checkpoint saved with `torch.save(model)` mid-run loads where this
package is not installed (a copy of our own class made it fail there: "No module named
'gradviz_widgets'").
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

#: the logger whose `log(0, ...)` an inert hook is: never emitted (level 0 is below the
#: `logging.disable` floor of 0), it returns None for any arguments, so as a forward hook or
#: pre-hook (with or without kwargs) it changes nothing
INERT_LOGGER = "gradviz_widgets.inert_hook"


def inert() -> functools.partial:
    """A hook that does nothing, built from the standard library alone (it pickles as
    `functools.partial` of `logging.getLogger(INERT_LOGGER).log` and level 0).

    Example:
        >>> import pickle
        >>> hook = inert()
        >>> hook(None, ()), hook(None, (), {}), pickle.loads(pickle.dumps(hook))(None, (), 1)
        (None, None, None)
    """
    return functools.partial(logging.getLogger(INERT_LOGGER).log, 0)


class ModelHook:
    """A hook calling `fn`; its copies (deepcopy, pickle, copy.copy) are `inert()`.

    Example:
        >>> import copy, pickle
        >>> hook = ModelHook(lambda *a: "called")
        >>> hook(None, ()), copy.deepcopy(hook)(None, ()), pickle.loads(pickle.dumps(hook))(None, ())
        ('called', None, None)
        >>> b"gradviz_widgets.watch" in pickle.dumps(hook)
        False
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any] | None = None) -> None:
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        fn = self.fn
        return None if fn is None else fn(*args)

    def __copy__(self) -> functools.partial:
        return inert()

    def __deepcopy__(self, memo: dict[int, Any]) -> functools.partial:
        return inert()

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        hook = inert()
        return functools.partial, (hook.func, *hook.args)

    def __repr__(self) -> str:
        return f"ModelHook({'inert' if self.fn is None else 'GradWatch'})"
