"""The one exception type users catch."""

from __future__ import annotations


class GradExplorerError(RuntimeError):
    """Bad input or a failing model, with a message that says what to do.

    Example:
        >>> try:
        ...     raise GradExplorerError("device 'cuda' is not available; available: cpu")
        ... except GradExplorerError as e:
        ...     print(e)
        device 'cuda' is not available; available: cpu
    """


def did_you_mean(close: list[str]) -> str:
    """The suggestion part of a "no such name" message: nothing when nothing is close.

    Example:
        >>> did_you_mean(["gate", "gate2"]), did_you_mean([])
        (" (did you mean 'gate' or 'gate2'?)", '')
    """
    if not close:
        return ""
    quoted = [repr(c) for c in close]
    return f" (did you mean {' or '.join(quoted) if len(quoted) < 3 else ', '.join(quoted)}?)"
