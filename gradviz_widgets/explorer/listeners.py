"""Who follows an explorer: callbacks told after each change of its hooks, modifiers,
thresholds or newest run, so every open widget shows the explorer's state whoever changed it.

A bound method is held by weak reference to its object: a widget that is closed and dropped
does not stay alive (or keep being told) because the explorer still knows it. Any other
callable (a function, a lambda) is held until its handle's `remove()`.
"""

from __future__ import annotations

import inspect
import warnings
import weakref
from collections.abc import Callable
from typing import Any

#: what changed, as `notify` tells it: "hooks" (hooks or modifiers), "thresholds", "run" (a
#: new newest run), "failed" (a run raised: `GradExplorer.failure`), "closed"
Listener = Callable[[str], Any]


class ChangeHandle:
    """What `GradExplorer.on_change` returns: `remove()` stops the notices."""

    def __init__(self, owner: ChangeListeners, ref: Callable[[], Any]) -> None:
        self._owner = owner
        self._ref = ref

    def remove(self) -> None:
        self._owner.discard(self._ref)


class ChangeListeners:
    """The listeners of one explorer: bound methods held weakly, other callables strongly.

    Example:
        >>> class Follower:
        ...     seen: list[str]
        ...     def __init__(self): self.seen = []
        ...     def changed(self, what): self.seen.append(what)
        >>> listeners, f = ChangeListeners(), Follower()
        >>> handle = listeners.add(f.changed)
        >>> listeners.notify("run"); f.seen
        ['run']
        >>> handle.remove(); listeners.notify("run"); f.seen
        ['run']
    """

    def __init__(self) -> None:
        self._refs: list[Callable[[], Any]] = []  # each gives its callback, or None once dead

    def add(self, callback: Listener) -> ChangeHandle:
        if not callable(callback):
            raise TypeError(f"a listener must be callable, got {type(callback).__name__}")
        ref: Callable[[], Any] = (
            weakref.WeakMethod(callback) if inspect.ismethod(callback) else lambda: callback
        )
        self._refs.append(ref)
        return ChangeHandle(self, ref)

    def discard(self, ref: Callable[[], Any]) -> None:
        self._refs = [r for r in self._refs if r is not ref]

    def clear(self) -> None:
        self._refs = []

    def notify(self, what: str) -> None:
        """Tell every live listener; one that fails is named in a warning and the others are
        still told (a listener never breaks the explorer call that changed the state)."""
        self._refs = [r for r in self._refs if r() is not None]
        for ref in list(self._refs):
            callback = ref()
            if callback is None:
                continue
            try:
                callback(what)
            except Exception as e:  # noqa: BLE001 - the user's call must go on
                warnings.warn(
                    f"a listener of this GradExplorer failed on {what!r} "
                    f"({type(e).__name__}: {e}); the explorer's state is unchanged",
                    RuntimeWarning,
                    stacklevel=3,
                )
