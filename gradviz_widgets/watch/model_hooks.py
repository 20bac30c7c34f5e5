"""What a GradWatch puts into the model's own hook dicts.

Copies of a watched model are common in training loops: an EMA or SWA model
(`copy.deepcopy(model)`, `torch.optim.swa_utils.AveragedModel(model)`), `torch.save(model)`,
a teacher. A bound method of the recorder in the model's hook dicts would be copied along with
the recorder (its writer thread's locks cannot be pickled: "cannot pickle '_thread.lock'").
A `ModelHook` copies or pickles as an inert hook instead: it holds nothing and does nothing,
so the copy is simply not watched and the original keeps being watched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ModelHook:
    """A hook calling `fn`; its copies (deepcopy, pickle, copy.copy) call nothing.

    Example:
        >>> import copy, pickle
        >>> hook = ModelHook(lambda *a: "called")
        >>> hook(None, ()), copy.deepcopy(hook)(None, ()), pickle.loads(pickle.dumps(hook)).fn
        ('called', None, None)
    """

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[..., Any] | None = None) -> None:
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        fn = self.fn
        return None if fn is None else fn(*args)

    def __copy__(self) -> ModelHook:
        return ModelHook()

    def __deepcopy__(self, memo: dict[int, Any]) -> ModelHook:
        return ModelHook()

    def __reduce__(self) -> tuple[type[ModelHook], tuple[()]]:
        return ModelHook, ()

    def __repr__(self) -> str:
        return f"ModelHook({'inert' if self.fn is None else 'GradWatch'})"
